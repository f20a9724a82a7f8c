"""What every process shares: settings, the database and the ORM, logs, problem details,
metrics."""
