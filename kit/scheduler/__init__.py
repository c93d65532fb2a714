"""A scheduler node: membership, partition leases, the fenced scan ahead, the timer
wheel and the dispatch to the run queue. Decisions come from kit.core; SQL from
kit.store.scheduling."""
