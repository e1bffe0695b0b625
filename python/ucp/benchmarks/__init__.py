"""Benchmarks of the `ucp` API; run `python -m ucp.benchmarks.send_recv --help`."""
