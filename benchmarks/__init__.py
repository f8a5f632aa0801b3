"""Benchmarks of the image_classifier ensemble against the in-process limit and a naive service.

Run ``python -m benchmarks.run --help``; results land in ``benchmarks/results/``.
"""
