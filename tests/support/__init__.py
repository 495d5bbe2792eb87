"""Helpers only tests and benchmarks use: a pprof reader, synthetic profiles, PM joins."""
