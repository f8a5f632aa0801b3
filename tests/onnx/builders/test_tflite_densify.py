"""The densify pass on TFLite models with sparse weights, in the ``tflite-convert`` environment (TensorFlow).

TensorFlow's own converter writes the models (``Optimize.EXPERIMENTAL_SPARSITY`` on a small Keras network whose
weights are mostly zero): float32 weights in 1x4 blocks, stored block-sparse and read by ``FULLY_CONNECTED``
itself (a ``block_map``, no ``DENSIFY``), and int8 weights with scattered zeros, stored CSR behind ``DENSIFY``.
:func:`builders.tflite.densify` rewrites each one and checks it on TFLite's interpreter (the ``DENSIFY`` outputs
bit for bit, the outputs on random inputs). MediaPipe's full-range face detector (float16 behind ``DENSIFY``),
densified on its way through tf2onnx, is tests/onnx/builders/test_face_detector_full_range.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import BuildError, build_envs, tflite

GENERATOR = """
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

folder = Path(sys.argv[1])
rng = np.random.default_rng(0)


def network(mask):
    inputs = tf.keras.Input((64,), batch_size=1)
    hidden = tf.keras.layers.Dense(128, activation="relu")(inputs)
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(32)(hidden))
    for layer in model.layers[1:]:
        kernel, bias = layer.get_weights()
        layer.set_weights([kernel * mask(kernel.shape), bias])
    return model


def convert(model, int8=False):
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY] + ([tf.lite.Optimize.DEFAULT] if int8 else [])
    if int8:
        converter.representative_dataset = lambda: ([rng.uniform(-1, 1, (1, 64)).astype(np.float32)] for _ in range(16))
    return converter.convert()


# Kept in 1x4 blocks along the inputs (the kernel is [inputs, outputs]; TFLite's weights [outputs, inputs]).
blocks = network(lambda shape: np.repeat(rng.random((shape[0] // 4, shape[1])) < 0.2, 4, axis=0))
(folder / "block_sparse_float32.tflite").write_bytes(convert(blocks))
scattered = network(lambda shape: rng.random(shape) < 0.2)
(folder / "csr_int8.tflite").write_bytes(convert(scattered, int8=True))
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sparse_models")
    script = folder / "make_sparse_models.py"
    script.write_text(GENERATOR)
    build_envs.run_in_env(tflite.CONVERT_ENV, [str(script), str(folder)], log=lambda _: None, timeout=600)
    return folder


def operators(path: Path) -> list[str]:
    """The builtin operator of every operator in ``path``, by name."""
    import tflite as schema

    model = schema.Model.GetRootAsModel(path.read_bytes(), 0)
    names = {value: name for name, value in vars(schema.BuiltinOperator).items() if not name.startswith("_")}
    codes = [
        max(model.OperatorCodes(i).BuiltinCode(), model.OperatorCodes(i).DeprecatedBuiltinCode())
        for i in range(model.OperatorCodesLength())
    ]
    subgraph = model.Subgraphs(0)
    return [names[codes[subgraph.Operators(i).OpcodeIndex()]] for i in range(subgraph.OperatorsLength())]


# model -> (tensor type, formats per traversed dimension, block_map, DENSIFY operators, the operators left)
EXPECTED = {
    "block_sparse_float32": ("FLOAT32", ["DENSE", "SPARSE_CSR", "DENSE"], [1], 0, ["FULLY_CONNECTED"] * 2),
    "csr_int8": ("INT8", ["DENSE", "SPARSE_CSR"], [], 2, ["QUANTIZE", "FULLY_CONNECTED", "FULLY_CONNECTED", "DEQUANTIZE"]),
}


@pytest.mark.parametrize("name", EXPECTED)
def test_densified_model_computes_what_the_sparse_one_does(models, tmp_path, name):
    kind, formats, block_map, densify_ops, left = EXPECTED[name]
    source, output = models / f"{name}.tflite", tmp_path / f"{name}.dense.tflite"
    assert len(tflite.sparse_tensors(source)) == 2
    assert operators(source).count("DENSIFY") == densify_ops
    lines: list[str] = []
    report = tflite.densify(source, output, lines.append)
    assert [(t["type"], t["formats"], t["block_map"]) for t in report["tensors"]] == [(kind, formats, block_map)] * 2
    assert all(t["stored_values"] < t["dense_values"] for t in report["tensors"])
    check = report["verification"]
    assert report["densify_ops_removed"] == densify_ops == check["densify_outputs_equal"]  # bit for bit, each one
    assert check["random_inputs"] == 3 and check["max_abs_diff"] <= 1e-5
    assert tflite.sparse_tensors(output) == [] and operators(output) == left
    assert f"removed {densify_ops} DENSIFY operator(s): {output.name}" in lines[-1]


def test_a_format_it_does_not_know_fails_in_one_line(models, tmp_path):
    """A dimension whose format is neither DENSE nor SPARSE_CSR: the tensor, the format and what is supported."""
    import tflite as schema

    data = bytearray((models / "csr_int8.tflite").read_bytes())
    subgraph = schema.Model.GetRootAsModel(data, 0).Subgraphs(0)
    tensor = next(subgraph.Tensors(i) for i in range(subgraph.TensorsLength()) if subgraph.Tensors(i).Sparsity() is not None)
    dimension = tensor.Sparsity().DimMetadata(1)
    position = dimension._tab.Pos + dimension._tab.Offset(4)  # DimensionMetadata.format, a byte
    assert data[position] == 1  # SPARSE_CSR
    data[position] = 2
    tampered = tmp_path / "tampered.tflite"
    tampered.write_bytes(bytes(data))
    with pytest.raises(BuildError) as error:
        tflite.densify(tampered, tmp_path / "out.tflite", log=lambda _: None)
    name = tensor.Name().decode()
    assert str(error.value) == (
        f"cannot densify tampered.tflite: sparse tensor '{name}' (INT8, shape [128, 64]): dimension 1 (traversal order) has format 2; "
        "supported: DENSE, SPARSE_CSR"
    )
    assert not (tmp_path / "out.tflite").exists()
