"""Graph passes (onnx-graphsurgeon) that make an ONNX model TensorRT-ready, by kind.

- :mod:`~builders.passes.graph`: what every pass shares (the pass shape, ``PassError``, helpers);
- :mod:`~builders.passes.cleanup`: constant folding, no-op removal, Pad->Conv, ReduceMean->GlobalAveragePool;
- :mod:`~builders.passes.batch`: the symbolic batch, batch-following Reshapes, the config's I/O names;
- :mod:`~builders.passes.einsum`: Einsum -> Transpose/Reshape/MatMul;
- :mod:`~builders.passes.custom_ops`: custom ops -> standard ops (one module per op, e.g.
  :mod:`~builders.passes.convolution_2d_transpose_bias`, with :mod:`~builders.passes.reference_ops`
  to verify them);
- :mod:`~builders.passes.registry`: every pass by name, the name check, the default order;
- :mod:`~builders.passes.onnx_io`: loading a model and exporting a graph with its metadata.

``builders.fix_onnx`` runs them, verified on onnxruntime.
"""
