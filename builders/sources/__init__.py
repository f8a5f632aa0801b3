"""Where a pipeline's core (and each second stage) comes from: one module per recipe ``[source] kind``, listed in
:mod:`builders.sources.registry`, each a :class:`builders.sources.base.SourceKind`.

A kind validates its ``[source]`` table for :mod:`builders.recipe`, and for :mod:`builders.export` either owns the
whole export (``efficientnet_lite0``: PyTorch's) or locates its model file and converts it to an unfixed ONNX
model, which the shared path then fixes, verifies and writes with its provenance.
"""
