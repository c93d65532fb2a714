"""The reaper: re-queues runs whose worker vanished and publishes runs never dispatched."""
