"""The worker: consume, claim, heartbeat, execute, finish; retries and dead letters."""
