"""``einsum_to_matmul`` (``builders/passes/einsum.py``): rewritten Einsums equal numpy's, the rest are left alone with a reason."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import helper

from builders import fix_onnx
from builders.passes import einsum
from tests.support.onnx_graphs import assert_same_outputs, fix, model, op_types, rng_array, run, value

EINSUMS = [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bhid,bhjd->bhij", [(2, 3, 4, 8), (2, 3, 5, 8)]),
    ("bhij,bhjd->bhid", [(2, 3, 4, 5), (2, 3, 5, 8)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)]),
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output
    ("bij,jkl->bikl", [(2, 3, 4), (4, 5, 6)]),  # two free labels on the right: Reshape
    ("bi,bj->bij", [(2, 3), (2, 4)]),  # outer product: nothing contracted
    ("bid,bjd->bji", [(2, 3, 4), (2, 5, 4)]),  # output transposed
    ("ij->ji", [(3, 4)]),  # one operand: a Transpose
]


@pytest.mark.parametrize("equation, shapes", EINSUMS)
def test_einsum_to_matmul(equation: str, shapes: list[tuple[int, ...]]) -> None:
    names = [f"in{i}" for i in range(len(shapes))]
    before = model(
        [helper.make_node("Einsum", names, ["y"], equation=equation)],
        [value(name, list(shape)) for name, shape in zip(names, shapes)],
        [value("y", None)],
        opset=17,
    )
    feeds = [rng_array(*shape, seed=i) for i, shape in enumerate(shapes)]

    result = fix(before, ["einsum_to_matmul"], fix_onnx.FixOptions())

    assert "Einsum" not in op_types(result.model)
    assert set(op_types(result.model)) <= {"MatMul", "Transpose", "Reshape"}
    assert_same_outputs(before, result.model, *feeds)
    np.testing.assert_allclose(run(result.model, *feeds)[0], np.einsum(equation, *feeds), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "equation, shapes, reason",
    [
        ("ii->i", [(3, 3)], "diagonal"),
        ("ij->i", [(3, 4)], "ReduceSum"),
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], "3 operands"),
        ("bij,bjk->bk", [(2, 3, 4), (2, 4, 5)], "summed within one operand"),
    ],
)
def test_einsum_left_alone_when_not_a_matmul(equation: str, shapes: list[tuple[int, ...]], reason: str) -> None:
    names = [f"in{i}" for i in range(len(shapes))]
    before = model(
        [helper.make_node("Einsum", names, ["y"], equation=equation)],
        [value(name, list(shape)) for name, shape in zip(names, shapes)],
        [value("y", None)],
    )
    graph = gs.import_onnx(onnx.shape_inference.infer_shapes(before))
    plan = einsum.einsum_plan(graph.nodes[0])
    assert isinstance(plan, str) and reason in plan
    assert einsum.einsum_to_matmul(graph) == 0
