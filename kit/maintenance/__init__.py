"""The maintenance service: expires what the kit no longer needs (kit.store.maintenance)."""
