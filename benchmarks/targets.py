"""The systems benchmark's targets, computed from the rows of one run (side by side, as ratios).

- **ensemble / limit before reduced decoding**, per upload mix and pipeline: the best ensemble
  throughput (either runtime, any concurrency) against the in-process limit of the pipeline as it
  was before reduced decoding (FP32 onnxruntime, OpenCV's full-size decode, batch 8, one thread per
  CPU). The image classifier's targets: at least 1.3 x on web photos and 2.5 x on 12 MP phone photos.
  Met only when the same ratio from CPU time (the limit's CPU ms per image / the ensemble's server +
  client CPU ms per request) agrees: on an otherwise idle machine both are CPU-bound and the two
  ratios are equal; on a loaded one the throughput ratio moves with the load, the CPU one far less.
- **ensemble / in-process limit** (the served computation in one process), per mix and pipeline: the
  ensemble at the run's highest concurrency at least 0.9 x the in-process limit on web and phone photos.
- **ensemble / naive service**: at every concurrency of 4 and more where both ran, the ensemble serves at least
  as many requests a second as the naive FastAPI service doing the same work; at 1, its p50 is behind the
  naive service's by at most the architecture's floor (``FLOOR_MS``: three identity Python steps in one
  ensemble on the same server).
- **c=1 latency**: the ensemble's p50 at concurrency 1 at most 1.5 x one in-process request (FP32
  onnxruntime on 2 threads).
- **no errors** at any concurrency, in any system.

Pure functions of the rows: nothing here imports onnxruntime or a client.
"""

from __future__ import annotations

from typing import Any

from benchmarks import CLASSIFIER

# (mix -> minimum ratio) of the classifier: ensemble throughput / the limit before reduced decoding.
BEFORE_REDUCED_DECODING = {"web": 1.3, "phone": 2.5}
SINGLE_REQUEST = 1.5  # c=1: ensemble p50 / one in-process request, at most
VS_INPROCESS = {"web": 0.9, "phone": 0.9}  # the ensemble at the highest concurrency / the in-process limit, at least
# The p50 at one client of an ensemble of three identity Python-backend steps (1 KB in, 196 KB, 61 KB and 16 B
# between them) on tritonserver 2.51, this machine: 1.34 ms (docs/design.md, "The served path costs what the work costs").
FLOOR_MS = 1.34
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


def _vs_limit(
    mix: str, pipeline: str, throughput: list[dict], inprocess: list[dict], system: str, wanted: float | None, top_only: bool = False
) -> dict | None:
    here = [r for r in throughput if r["mix"] == mix and r["pipeline"] == pipeline and r["system"] in ENSEMBLES]
    if top_only and here:
        top = max(r["concurrency"] for r in here)
        here = [r for r in here if r["concurrency"] == top]
    best = _best(here)
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
    description = f"{mix}, {pipeline}: {'ensemble at the highest concurrency' if top_only else 'best ensemble'} / {what}"
    if wanted is not None:
        description += f" >= {wanted}" + ("" if top_only else " (and the same from CPU time)")
    met = (ratio >= wanted and (top_only or cpu_ratio is None or cpu_ratio >= wanted)) if wanted is not None else None
    return {
        **_check(f"{mix}/{pipeline}/vs_{system}", description, round(ratio, 3), detail, met),
        "cpu_ratio": cpu_ratio and round(cpu_ratio, 3),
    }


def _vs_naive(mix: str, pipeline: str, throughput: list[dict]) -> list[dict]:
    """The ensemble (gRPC) against the naive service at each concurrency both ran."""
    found = []
    for naive in sorted(
        (r for r in throughput if (r["mix"], r["pipeline"], r["system"]) == (mix, pipeline, "naive")), key=lambda r: r["concurrency"]
    ):
        level = naive["concurrency"]
        ensemble = next(
            (r for r in throughput if (r["mix"], r["pipeline"], r["system"], r["concurrency"]) == (mix, pipeline, "ensemble_grpc", level)),
            None,
        )
        if not ensemble or not naive.get("throughput") or not ensemble.get("throughput"):
            continue
        if level == 1 and naive.get("p50_ms") and ensemble.get("p50_ms"):
            behind = ensemble["p50_ms"] - naive["p50_ms"]
            found.append(
                _check(
                    f"{mix}/{pipeline}/c1_vs_naive",
                    f"{mix}, {pipeline}: ensemble p50 at c=1 behind the naive service's by <= the floor ({FLOOR_MS} ms)",
                    round(behind, 2),
                    f"{ensemble['p50_ms']:.1f} vs {naive['p50_ms']:.1f} ms",
                    behind <= FLOOR_MS,
                )
            )
        elif level >= 4:
            ratio = ensemble["throughput"] / naive["throughput"]
            found.append(
                _check(
                    f"{mix}/{pipeline}/c{level}_vs_naive",
                    f"{mix}, {pipeline}: ensemble / the naive service at c={level} >= 1",
                    round(ratio, 3),
                    f"{ensemble['throughput']:.1f} vs {naive['throughput']:.1f} req/s",
                    ratio >= 1.0,
                )
            )
    return found


def checks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every target, met (True), missed (False) or context only (None), from a run's rows."""
    throughput = [r for r in rows if r["table"] == "throughput"]
    inprocess = [r for r in rows if r["table"] == "inprocess"]
    found = []
    for mix, pipeline in dict.fromkeys((r["mix"], r["pipeline"]) for r in throughput):
        wanted = BEFORE_REDUCED_DECODING.get(mix) if pipeline == CLASSIFIER.name else None
        for system, target, top_only in (("inprocess_reference", wanted, False), ("inprocess", VS_INPROCESS.get(mix), True)):
            check = _vs_limit(mix, pipeline, throughput, inprocess, system, target, top_only)
            if check:
                found.append(check)
        found += _vs_naive(mix, pipeline, throughput)
        single = next((r for r in inprocess if (r["mix"], r["pipeline"], r["system"]) == (mix, pipeline, "single_request")), None)
        at_one = next(
            (r for r in throughput if (r["mix"], r["pipeline"], r["system"], r["concurrency"]) == (mix, pipeline, "ensemble_grpc", 1)), None
        )
        if single and at_one and single.get("batch_ms_p50") and at_one.get("p50_ms"):
            ratio = at_one["p50_ms"] / single["batch_ms_p50"]
            target = mix in ("web", "phone")
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
