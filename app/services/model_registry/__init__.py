"""Trained model versions, their aliases, tags and descriptions, and their bytes in Postgres."""
