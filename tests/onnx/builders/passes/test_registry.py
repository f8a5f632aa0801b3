"""The one pass registry: every name anyone gives (``fix --passes``, recipes, check's hints) is registered."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import onnx
import onnx_graphsurgeon as gs
import pytest

from builders import BuildError, export, fix_onnx, loaded
from builders.passes import batch, cleanup, registry
from builders.passes.graph import PassError
from vision_serving import layout

BUILDERS = Path(__file__).resolve().parents[4] / "builders"
TRT_COMPAT = (BUILDERS / "trt_compat.py", BUILDERS / "trt_compat_rules.py")


def trt_compat_fix_hints() -> set[str]:
    """Every pass name in a ``fix=(...)`` of builders/trt_compat.py and its rules (read with ``ast``, nothing run)."""
    hints: set[str] = set()
    for node in (node for path in TRT_COMPAT for node in ast.walk(ast.parse(path.read_text()))):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg != "fix" or (isinstance(keyword.value, ast.Name) and keyword.value.id == "fix"):
                continue  # Checker.add passing its own argument on
            assert isinstance(keyword.value, ast.Tuple), f"line {node.lineno}: a fix hint that is not a literal tuple"
            for element in keyword.value.elts:
                assert isinstance(element, ast.Constant) and isinstance(element.value, str), f"line {node.lineno}"
                hints.add(element.value)
    return hints


def test_every_fix_hint_check_can_emit_is_a_registered_pass() -> None:
    hints = trt_compat_fix_hints()
    assert {
        "custom_op_rewrites",
        "remove_noops",
        "fuse_pad_into_conv",
        "batch_dimension",
        "einsum_to_matmul",
    } <= hints  # the walk finds them
    assert registry.check_names(sorted(hints)) == sorted(hints)


def test_names_defaults_and_docs() -> None:
    assert set(registry.DEFAULT_PASSES) | set(registry.OPTIONAL_PASSES) == set(registry.names())
    assert not set(registry.DEFAULT_PASSES) & set(registry.OPTIONAL_PASSES)
    assert len(registry.DEFAULT_PASSES) == len(set(registry.DEFAULT_PASSES))
    assert registry.DEFAULT_PASSES.index("batch_reshape_placeholder") > registry.DEFAULT_PASSES.index("batch_dimension")
    documented = {**registry.PASSES, "stable_io_names": batch.stable_io_names, "batch_dimension": batch.set_batch_dimension}
    assert set(documented) == set(registry.names())
    for name, function in documented.items():
        assert function.__doc__ and "Before" in function.__doc__ and "After" in function.__doc__, name
    assert registry.PASSES["fold_constants_and_cleanup"] is cleanup.fold_constants_and_cleanup


def test_one_name_check_for_every_caller(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"^unknown pass\(es\) nope; known: batch_dimension, "):
        registry.check_names(["remove_noops", "nope"])
    # fix --passes
    with pytest.raises(registry.UnknownPassError, match="unknown pass"):
        fix_onnx.parse_pass_list("remove_noops,nope")
    assert fix_onnx.parse_pass_list(None) == list(registry.DEFAULT_PASSES)
    # apply_passes, before it reads the model
    with pytest.raises(registry.UnknownPassError, match="unknown pass"):
        registry.apply_passes(onnx.ModelProto(), ["nope"])
    # every recipe's [fix] passes; an unknown one stops export before any conversion
    for pipeline in layout.pipelines():
        registry.check_names(loaded.load(pipeline).recipe.fix.passes, str(pipeline.recipe))
    classifier = layout.pipeline("image_classifier")
    copy = layout.Pipeline.at(tmp_path / "model_repository" / classifier.name)
    shutil.copytree(classifier.repository, copy.repository, ignore=shutil.ignore_patterns("*.onnx", "*.json", "__pycache__"))
    copy.recipe.write_text(classifier.recipe.read_text().replace('"fold_constants_and_cleanup"]', '"fold_constants"]'))
    with pytest.raises(registry.UnknownPassError, match=r"pipeline.toml \[fix\] passes: unknown pass\(es\) fold_constants;"):
        export.export(loaded.load(copy))


def test_config_bound_passes_need_the_config() -> None:
    with pytest.raises(PassError, match="batch_dimension needs the core config"):
        registry.bound_passes(None)["batch_dimension"](gs.Graph())
    assert registry.bound_passes(fix_onnx.FixOptions())["batch_dimension"](gs.Graph()) == 0
