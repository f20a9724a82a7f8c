"""Benchmarks: scripts that print measured numbers against peers run in the same command."""
