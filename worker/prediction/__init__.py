"""Batch prediction jobs: one model over a stored dataset, streamed into Parquet."""
