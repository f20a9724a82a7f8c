"""The domain the API and the worker share, one package per subdomain: inference (serving),
data (datasets and ingest), job_queue, model_registry, tenancy, filestore, notifications
(webhooks); cursors.py is the keyset pagination every list uses. Nothing here imports
``app.api``."""
