"""Training on Apache Spark (``backend: "spark"``) and its automatic hyperparameters."""
