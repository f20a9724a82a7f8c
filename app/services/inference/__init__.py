"""Serving predictions online: every protocol's request path, the caches, micro-batching,
loaded models and margin monitoring."""
