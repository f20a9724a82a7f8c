"""sodm REST service: datasets, training jobs, models and predictions."""

API_VERSION = "0.1.0"  # the OpenAPI document's and GET /v2's version
