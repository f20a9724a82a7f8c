"""The HTTP layer: routes, authentication, rate limits, the HTTP edge, downloads and the
dashboard's files. Nothing outside it (but ``app.main`` and ``app.cli``) imports it; the
worker never does."""
