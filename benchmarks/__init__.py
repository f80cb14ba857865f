"""The benchmark suite: `python -m benchmarks NAME [--quick]` (benchmarks/registry.py lists them)."""
