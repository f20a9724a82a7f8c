"""A job's life in the worker: the lease and heartbeat, its state and terminal writes, liveness
of the worker, the reaper, a dead pool child, the per-job memory limit."""
