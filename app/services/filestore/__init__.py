"""The object store (a directory or a bucket), the dataset files and prediction outputs in it,
and the sweep of stale files."""
