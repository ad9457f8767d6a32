"""Benchmark tooling: machine identity, result loading, reports and comparisons."""
