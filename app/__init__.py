"""sodm REST service: datasets, training jobs, models and predictions."""

__version__ = "0.1.0"  # the API's version (OpenAPI document, GET /v2)
