"""Development tooling: the local tritonserver launcher, the pipelines' client, the load generator, the rollout and canary tools.

Used by ``scripts/`` (entry points), the tests and the benchmarks; not
installed in the serving image.
"""
