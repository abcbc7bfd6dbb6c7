"""Serving benchmarks: the load client, sweeps, the decode roofline, bench records and reports,
and a recipe's expected figures."""
