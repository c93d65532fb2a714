"""A scheduler node: membership, partition leases, the fenced scan ahead, and the publish
of what each scan committed to the run queue (workers hold runs until their second).
Decisions come from kit.core; SQL from kit.store.scheduling."""
