"""A ``.tflite`` whose constant tensors are stored sparse, rewritten with every one of them stored dense.

TFLite can store a constant tensor sparse (``Tensor.sparsity``: ``traversal_order``, ``block_map``
and one ``dim_metadata`` per traversed dimension, each DENSE with a ``dense_size`` or SPARSE_CSR with
``array_segments``/``array_indices``, an Int32Vector, Uint16Vector or Uint8Vector) and densify it at
run time with a ``DENSIFY`` operator; MediaPipe's full-range face detector stores its 1x1 convolution
weights that way (float16, then ``DEQUANTIZE``). tf2onnx reads the stored values as if they were dense
and fails (``cannot reshape array of size 77 into shape (8,1,1,32)``). This pass:

1. densifies every sparse constant tensor in place (:func:`densify`: TFLite's ``FormatConverter``,
   ``tensorflow/lite/kernels/internal/utils/sparsity_format_converter.cc``), its sparsity dropped;
2. removes every ``DENSIFY`` operator: what read its output reads the densified constant instead
   (its output tensor goes, and so does the ``DENSIFY`` operator code once no operator uses it);
3. checks the result with TFLite's own interpreter (:func:`verify`): each ``DENSIFY`` output of the
   sparse model, as TFLite computes it, equals the densified constant bit for bit, and the two
   models' outputs agree within :data:`MAX_ABS_DIFF` on seeded random inputs.

STANDALONE: runs as a script inside the ``tflite-convert`` build environment (TensorFlow is there,
with the flatbuffer schema's object API, ``tensorflow.lite.python.schema_py_generated``, and the
interpreter), like tf2onnx (:func:`builders.tflite.densify`)::

    python -m builders.tflite_densify SOURCE.tflite OUTPUT.tflite --report REPORT.json

At module level the package imports only numpy and the standard library (the index math and the rewiring are
plain Python, tested in ``.venv``); TensorFlow is imported inside the functions that read, write and
run models. A model it cannot densify, or a check that fails, is one line in the report's ``error``
(and on stderr), exit status 2 (cannot) or 1 (a check failed).
"""

from __future__ import annotations

from .rewrite import densify_model
from .sparsity import DENSE, SPARSE_CSR, DensifyError, DimMetadata, densify

__all__ = ["DENSE", "SPARSE_CSR", "DensifyError", "DimMetadata", "densify", "densify_model"]
