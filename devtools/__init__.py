"""Development tooling: the local tritonserver launcher, one ensemble client and the load generator.

Used by ``scripts/`` (entry points), the tests and the benchmarks; not
installed in the serving image.
"""
