"""Jobs as the API sees them: training requests checked against the algorithm specs, batch
prediction jobs, sending tasks to the workers and their liveness."""
