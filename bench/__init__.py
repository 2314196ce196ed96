"""Benchmarks: each `bench_*.py` module has `run() -> dict` and prints JSON. Not part of the tests."""
