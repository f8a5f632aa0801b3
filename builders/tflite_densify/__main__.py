"""The files and TFLite's interpreter (TensorFlow): read, rewrite, write and verify a model; the command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from .rewrite import _buffer_bytes, _densify_codes, densify_model
from .sparsity import FILE_IDENTIFIER, MAX_ABS_DIFF, VERIFY_SEED, Densified, DensifyError, VerificationFailed

# --------------------------------------------------------------------------- files and the interpreter (TensorFlow)


def _schema() -> Any:
    """TensorFlow's generated flatbuffer schema (object API), loaded from its file: it needs only ``flatbuffers``, and
    importing it through the ``tensorflow`` package would import all of TensorFlow first (about 15 s)."""
    import importlib.util

    found = importlib.util.find_spec("tensorflow")
    for folder in (found.submodule_search_locations or []) if found is not None else []:
        path = Path(folder) / "lite" / "python" / "schema_py_generated.py"
        spec = importlib.util.spec_from_file_location("tflite_schema_py_generated", path) if path.is_file() else None
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    from tensorflow.lite.python import schema_py_generated  # type: ignore[import-not-found]  # the tflite-convert env only

    return schema_py_generated


def read_model(data: bytes) -> Any:
    schema = _schema()
    return schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))


def write_model(model: Any) -> bytes:
    import flatbuffers  # type: ignore[import-untyped]

    builder = flatbuffers.Builder(1 << 20)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


def sparse_tensor_count(model: Any) -> int:
    return sum(tensor.sparsity is not None for subgraph in model.subgraphs or [] for tensor in subgraph.tensors or [])


def _interpreter(content: bytes, reference: bool = False) -> Any:
    from tensorflow.lite.python import interpreter as tflite_interpreter  # type: ignore[import-not-found]

    options: dict[str, Any] = {"model_content": content}
    if reference:  # TFLite's own kernels (no XNNPACK delegate), every tensor kept readable after invoke
        options["experimental_op_resolver_type"] = tflite_interpreter.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        options["experimental_preserve_all_tensors"] = True
    runner = tflite_interpreter.Interpreter(**options)
    runner.allocate_tensors()
    return runner


def random_inputs(details: list[dict[str, Any]], count: int, seed: int = VERIFY_SEED) -> list[list[np.ndarray]]:
    """``count`` seeded input sets: floats uniform in [-1, 1], then [0, 1], then normal (an image normalized either
    way, and wider); integers uniform over their type's range (at most 0..255)."""
    rng = np.random.default_rng(seed)
    sets = []
    for index in range(count):
        arrays = []
        for detail in details:
            shape = [int(d) if d > 0 else 1 for d in detail.get("shape_signature", detail["shape"])]
            dtype = np.dtype(detail["dtype"])
            array: np.ndarray
            if np.issubdtype(dtype, np.floating):
                kind = index % 3
                array = rng.uniform(-1, 1, shape) if kind == 0 else rng.uniform(0, 1, shape) if kind == 1 else rng.normal(0, 1, shape)
            elif dtype == np.bool_:
                array = rng.integers(0, 2, shape)
            else:
                info = np.iinfo(dtype)
                array = rng.integers(max(int(info.min), 0), min(int(info.max), 255) + 1, shape)
            arrays.append(np.asarray(array, dtype=dtype))
        sets.append(arrays)
    return sets


def _run(runner: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    resized = False
    for detail, array in zip(runner.get_input_details(), inputs):
        if list(detail["shape"]) != list(array.shape):
            runner.resize_tensor_input(detail["index"], array.shape)
            resized = True
    if resized:
        runner.allocate_tensors()
    for detail, array in zip(runner.get_input_details(), inputs):
        runner.set_tensor(detail["index"], array)
    runner.invoke()
    return [np.array(runner.get_tensor(detail["index"])) for detail in runner.get_output_details()]


def verify(sparse: bytes, dense: bytes, densified: list[Densified], dense_model: Any, runs: int = 3) -> dict[str, Any]:
    """The densified model against the sparse one on TFLite's interpreter.

    1. TFLite's reference kernels run the sparse model once: each ``DENSIFY`` output (TFLite's own
       ``FormatConverter``) must equal the constant this pass wrote, bit for bit;
    2. both models, on the default interpreter (XNNPACK, as MediaPipe runs them), on ``runs`` seeded random
       inputs: every output within :data:`MAX_ABS_DIFF`.
    """
    sparse_model = read_model(sparse)
    reference = _interpreter(sparse, reference=True)
    _run(reference, random_inputs(reference.get_input_details(), 1)[0])
    by_tensor = {d.tensor: d for d in densified if d.subgraph == 0}
    codes = _densify_codes(sparse_model)
    compared = 0
    for operator in sparse_model.subgraphs[0].operators or []:  # the interpreter runs subgraph 0
        if int(operator.opcodeIndex) not in codes:
            continue
        record = by_tensor.get(int(operator.inputs[0]))
        if record is None:
            continue
        computed = np.asarray(reference.get_tensor(int(operator.outputs[0])))
        written = np.frombuffer(_buffer_bytes(dense_model.buffers[record.buffer]), dtype=computed.dtype)
        if computed.tobytes() != written.tobytes():
            differ = int(np.count_nonzero(computed.reshape(-1) != written.reshape(-1))) if computed.size == written.size else computed.size
            raise VerificationFailed(f"'{record.name}': {differ} of {computed.size} values differ from TFLite's DENSIFY output")
        compared += 1
    worst = 0.0
    per_output: list[float] = []
    sparse_runner, dense_runner = _interpreter(sparse), _interpreter(dense)
    for inputs in random_inputs(sparse_runner.get_input_details(), runs, VERIFY_SEED + 1):
        expected, actual = _run(sparse_runner, inputs), _run(dense_runner, inputs)
        if len(expected) != len(actual):
            raise VerificationFailed(f"the densified model has {len(actual)} outputs, the sparse one {len(expected)}")
        diffs = [float(np.max(np.abs(e.astype(np.float64) - a.astype(np.float64)), initial=0.0)) for e, a in zip(expected, actual)]
        per_output = [max(x, y) for x, y in zip(per_output, diffs)] if per_output else diffs
        worst = max(worst, *diffs)
    if not worst <= MAX_ABS_DIFF:
        raise VerificationFailed(
            f"the densified model's outputs differ from the sparse model's by up to {worst:.3g} (> {MAX_ABS_DIFF:g}) on random inputs"
        )
    return {
        "densify_outputs_equal": compared,
        "random_inputs": runs,
        "max_abs_diff": worst,
        "max_abs_diff_per_output": per_output,
        "max_allowed": MAX_ABS_DIFF,
    }


def densify_file(source: Path, output: Path, runs: int = 3) -> dict[str, Any]:
    """``source`` -> ``output`` with every sparse constant dense and every ``DENSIFY`` gone, verified; the report."""
    started = time.perf_counter()
    data = source.read_bytes()
    model = read_model(data)
    if not sparse_tensor_count(model):
        raise DensifyError("it has no sparse tensors")
    densified, removed = densify_model(model)
    dense = write_model(model)
    check = read_model(dense)  # what was written reads back: no sparse tensor, no DENSIFY
    if sparse_tensor_count(check) or any(
        int(op.opcodeIndex) in _densify_codes(check) for sg in check.subgraphs for op in sg.operators or []
    ):
        raise VerificationFailed("the rewritten model still holds sparse tensors or DENSIFY operators")
    verification = verify(data, dense, densified, check, runs)
    temporary = output.with_name(f".{output.name}.tmp")
    temporary.write_bytes(dense)
    temporary.replace(output)
    return {
        "source": source.name,
        "output": output.name,
        "tensors": [d.as_dict() for d in densified],
        "densify_ops_removed": removed,
        "bytes": {"source": len(data), "output": len(dense)},
        "verification": verification,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--report", type=Path, required=True, help="JSON: what was densified and the checks' numbers, or the error")
    parser.add_argument("--runs", type=int, default=3, help="random input sets the outputs are compared on (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        report = densify_file(args.source, args.output, args.runs)
        status = 0
    except DensifyError as error:
        report, status = {"error": str(error), "check_failed": isinstance(error, VerificationFailed)}, error.exit_code
        print(f"tflite_densify: {args.source.name}: {error}", file=sys.stderr)
    except Exception as error:  # a model this pass misreads: one line for the build, the traceback on stderr
        traceback.print_exc()
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        report, status = {"error": f"{type(error).__name__} while rewriting it: {first}", "check_failed": False}, 2
    args.report.write_text(json.dumps(report, indent=2) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
