"""Benchmarks: they print tables, compare against the baselines in the same run, report ratios."""
