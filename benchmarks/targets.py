"""The systems benchmark's targets, computed from the rows of one run (side by side, as ratios).

- **ensemble / limit before reduced decoding**, per upload mix and pipeline: the best ensemble
  throughput (either runtime, any concurrency) against the in-process limit of the pipeline as it
  was before reduced decoding (FP32 onnxruntime, OpenCV's full-size decode, batch 8, one thread per
  CPU). The image classifier's targets: at least 1.3 x on web photos and 2.5 x on 12 MP phone photos.
  Met only when the same ratio from CPU time (the limit's CPU ms per image / the ensemble's server +
  client CPU ms per request) agrees: on an otherwise idle machine both are CPU-bound and the two
  ratios are equal; on a loaded one the throughput ratio moves with the load, the CPU one far less.
- **ensemble / in-process limit** (the served computation in one process), per mix and pipeline:
  what serving costs beyond the computation (context, no target).
- **c=1 latency**: the ensemble's p50 at concurrency 1 at most 1.5 x one in-process request (FP32
  onnxruntime on 2 threads), web photos.
- **no errors** at any concurrency, in any system.

Pure functions of the rows: nothing here imports onnxruntime or a client.
"""

from __future__ import annotations

from typing import Any

from benchmarks import CLASSIFIER

# (mix -> minimum ratio) of the classifier: ensemble throughput / the limit before reduced decoding.
BEFORE_REDUCED_DECODING = {"web": 1.3, "phone": 2.5}
SINGLE_REQUEST = 1.5  # c=1: ensemble p50 / one in-process request, at most
ENSEMBLES = ("ensemble_grpc", "ensemble_openvino")


def _best(selected: list[dict[str, Any]]) -> dict[str, Any] | None:
    measured = [r for r in selected if r.get("throughput")]
    return max(measured, key=lambda r: r["throughput"]) if measured else None


def _cpu_per_request(r: dict[str, Any]) -> float | None:
    if r.get("server_cpu_ms_per_request") is None:
        return None
    return r["server_cpu_ms_per_request"] + (r.get("client_cpu_ms_per_request") or 0.0)


def _check(name: str, description: str, value: Any, detail: str, met: bool | None) -> dict[str, Any]:
    return {"check": name, "description": description, "value": value, "detail": detail, "met": met}


def _vs_limit(mix: str, pipeline: str, throughput: list[dict], inprocess: list[dict], system: str, wanted: float | None) -> dict | None:
    here = [r for r in throughput if r["mix"] == mix and r["pipeline"] == pipeline]
    best = _best([r for r in here if r["system"] in ENSEMBLES])
    limit = _best([r for r in inprocess if (r["mix"], r["pipeline"], r["system"]) == (mix, pipeline, system)])
    if not best or not limit:
        return None
    ratio = best["throughput"] / limit["throughput"]
    ensemble_cpu = _cpu_per_request(best)
    cpu_ratio = limit["cpu_ms_per_image"] / ensemble_cpu if ensemble_cpu and limit.get("cpu_ms_per_image") else None
    detail = (
        f"{best['system']} {best['throughput']:.1f} req/s at c={best['concurrency']} vs {limit['throughput']:.1f} img/s "
        f"({limit['mode']}, batch {limit['batch_size']})"
    )
    if cpu_ratio:
        detail += f"; from CPU time: {cpu_ratio:.2f} ({limit['cpu_ms_per_image']:.1f} CPU ms/img vs {ensemble_cpu:.1f} per request)"
    what = "the limit before reduced decoding" if system == "inprocess_reference" else "the in-process limit"
    description = f"{mix}, {pipeline}: best ensemble / {what}"
    if wanted is not None:
        description += f" >= {wanted} (and the same from CPU time)"
    met = (ratio >= wanted and (cpu_ratio is None or cpu_ratio >= wanted)) if wanted is not None else None
    return {
        **_check(f"{mix}/{pipeline}/vs_{system}", description, round(ratio, 3), detail, met),
        "cpu_ratio": cpu_ratio and round(cpu_ratio, 3),
    }


def checks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every target, met (True), missed (False) or context only (None), from a run's rows."""
    throughput = [r for r in rows if r["table"] == "throughput"]
    inprocess = [r for r in rows if r["table"] == "inprocess"]
    found = []
    for mix, pipeline in dict.fromkeys((r["mix"], r["pipeline"]) for r in throughput):
        wanted = BEFORE_REDUCED_DECODING.get(mix) if pipeline == CLASSIFIER.name else None
        for system, target in (("inprocess_reference", wanted), ("inprocess", None)):
            check = _vs_limit(mix, pipeline, throughput, inprocess, system, target)
            if check:
                found.append(check)
        single = next((r for r in inprocess if (r["mix"], r["pipeline"], r["system"]) == (mix, pipeline, "single_request")), None)
        at_one = next(
            (r for r in throughput if (r["mix"], r["pipeline"], r["system"], r["concurrency"]) == (mix, pipeline, "ensemble_grpc", 1)), None
        )
        if single and at_one and single.get("batch_ms_p50") and at_one.get("p50_ms"):
            ratio = at_one["p50_ms"] / single["batch_ms_p50"]
            target = mix == "web" and pipeline == CLASSIFIER.name
            found.append(
                _check(
                    f"{mix}/{pipeline}/c1_p50",
                    f"{mix}, {pipeline}: ensemble (gRPC) p50 at c=1 / one in-process request (FP32 onnxruntime, 2 threads)"
                    + (f" <= {SINGLE_REQUEST}" if target else ""),
                    round(ratio, 3),
                    f"{at_one['p50_ms']:.1f} vs {single['batch_ms_p50']:.1f} ms",
                    ratio <= SINGLE_REQUEST if target else None,
                )
            )
    errors: dict[str, int] = {}
    for r in throughput:
        key = f"{r['mix']}/{r['pipeline']}/{r['system']}"
        errors[key] = errors.get(key, 0) + int(r.get("errors") or 0) + (1 if r.get("error") else 0)
    found.append(
        _check(
            "no_errors",
            "no errors at any concurrency, in any system",
            sum(errors.values()),
            _errors_detail(errors),
            not any(errors.values()),
        )
    )
    return found


def _errors_detail(errors: dict[str, int]) -> str:
    failed = {key: count for key, count in errors.items() if count}
    return ", ".join(f"{key}: {count}" for key, count in failed.items()) if failed else f"{len(errors)} systems x mixes, none"
