"""Datasets: their rows and files, and the ingest of an upload (parse slots, the parse child,
the sweep of what dead uploads leave)."""
