"""sodm REST service: datasets, training jobs, models and predictions."""
