"""What-ifs: the served configuration against a changed one, side by side, each what-if an option.

    .venv/bin/python -m benchmarks.whatif [--decode-gate] [--decode-bounds [--pipelines NAME,...]] [--oversampling X ...] [--reducing-gap X ...] [--per-photo N]
        [--configs NAME=EDITS ...] [--overload CLIENTS,...] [--drift-reference] [--pipeline NAME] [--output DIR]

With no what-if option: ``--decode-gate``. Each option adds its what-if to one run (one result):

- ``--decode-gate``: the served classifier's answers (reduced JPEG decoding, the served core config
  ``configs/cpu.pbtxt``) against FP32 onnxruntime on the served decoder at full size, on held-out
  photos: the recipe's ``evaluation_photos`` (never used for calibration) and ``--per-photo`` seeded
  augmentations of each, sent at one of three sizes in turn: a 12 MP phone photo (as in
  ``benchmarks/images.py``, every other one stored sideways with EXIF orientation 6), 2048 px and
  1280 px. The served answer's gate: top-1 agreement >= 0.95 over all images (the run exits 1 when the
  served configuration misses it); top-5 overlap reported. Context: the full decode shrunk with area
  averaging to the reduced decode's size, then the served preprocessing (a reference without the
  aliasing of a large bicubic downscale).
- ``--decode-bounds``: every pipeline whose preprocess decodes JPEGs reduced (``decode_oversampling``
  above 0; ``--pipelines``), its answers against the same pipeline decoding every photo at full size
  (``decode_oversampling`` 0), on the ``web`` and ``phone`` upload mixes, by its task's own gate metrics
  (detections: the same count, matched box IoU; masks: the two-class mean IoU and the foreground IoU of
  each photo), with the bounds the reduced decode is held to (top-1 unchanged, boxes IoU >= 0.98, masks >= 0.99) and, for
  context, the same metrics between the full decodes of two noise draws of the same phone photos: how much
  the answers move when nothing but the sensor noise changes. And what decode and preprocess cost per photo.
- ``--oversampling X`` / ``--reducing-gap X``: the same gate with another ``decode_oversampling`` or
  ``resize_reducing_gap`` than the preprocess config's (the reducing gap applies to the reference
  too), and what decode and preprocess then cost per image (CPU ms, one thread, web and phone photos).
- ``--configs NAME=EDITS ...``: A/B of serving configurations, one server per variant, all up for
  the whole comparison, measured in turn round after round (so drifting background load hits them
  alike); medians of ``--rounds``. EDITS are ``;``-separated ``role.key=value`` changes to a private
  copy of the pipeline (role: preprocess, core, postprocess; core edits go to ``configs/cpu.pbtxt``,
  the config the CPU server loads); keys: ``instances``, ``delay_us`` (max queue delay),
  ``preferred`` (preferred batch sizes, ``/``-separated, empty for none), ``max_batch``,
  ``param.NAME`` (a string parameter, e.g. ``core.param.intra_op_threads=1``). ``NAME=`` is the
  repository as it is, ``NAME=@PATH`` a prepared model repository holding the pipeline.
- ``--overload CLIENTS,...``: the served repository against a copy without ``default_queue_policy``
  (unbounded queues, the behaviour before bounded queues) at each number of clients, raw
  tritonclient, no retries, a rejected client pausing 50 ms: accepted p50/p99, the rejected share and
  p99, and the requests each step completed (Triton counts a rejection neither as success nor failure).
- ``--drift-reference``: day-one p-values of a product's traffic (package photos, augmented, resized
  to 1024x768, JPEG q80-92) against the default (held-out) drift reference and against one built from
  a disjoint sample of that traffic with ``builders drift-reference --photos`` (on a copy in .build/).

Results: ``whatif.json`` and ``whatif.md`` in ``--output`` (benchmarks/results by default).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import tritonclient.grpc as grpcclient
from google.protobuf import text_format

from benchmarks import CLASSIFIER, cpu, images, inprocess, report, senders, steps, triton_stats
from devtools import loadgen
from devtools.triton_server import BUILD_DIR, MODEL_REPOSITORY, LocalTritonServer
from vision_serving import image_codec, layout, model_config

BENCHMARK = "whatif"
WORK_DIR = BUILD_DIR / "bench" / "whatif"
MIN_TOP1 = 0.95
SIZES = ("12MP", "2048", "1280")


# ---------------------------------------------------------------------------- the decode gate


def held_out_images(per_photo: int) -> list[tuple[str, str, bytes]]:
    """(name, size kind, encoded bytes): the held-out photos and ``per_photo`` augmentations each, at the three sizes in turn."""
    from builders import calibration, loaded

    classifier = loaded.load(CLASSIFIER)
    sources = calibration.evaluation_sources(classifier)
    limits = classifier.configs.limits
    samples = calibration.make_samples(
        sources, len(sources) * (per_photo + 1), calibration.EVALUATION_SEED, calibration.EVALUATION_PROFILE, limits
    )
    made = []
    for index, sample in enumerate(samples):
        bgr = cv2.cvtColor(image_codec.decode_rgb(sample.data, limits), cv2.COLOR_RGB2BGR)
        kind = SIZES[index % len(SIZES)]
        if kind == "12MP":
            data = images.phone_photo(bgr, seed=index, rotated=(index // len(SIZES)) % 2 == 1)
        else:
            scale = int(kind) / max(bgr.shape[:2])
            resized = cv2.resize(bgr, (round(bgr.shape[1] * scale), round(bgr.shape[0] * scale)), interpolation=cv2.INTER_CUBIC)
            data = cv2.imencode(".jpg", resized, [cv2.IMWRITE_JPEG_QUALITY, images.JPEG_QUALITY])[1].tobytes()
        made.append((f"{sample.source}#{sample.index}", kind, data))
    return made


def _logits(served: inprocess.BenchedPipeline, decoded: image_codec.Decoded) -> np.ndarray:
    """The core's first output for one decoded image, through the served preprocessing."""
    return next(iter(served.run_core(served.core_feeds(served.preprocessed([decoded]))).values()))[0]


def _compare(served: inprocess.BenchedPipeline, reference: inprocess.BenchedPipeline, name: str, kind: str, data: bytes) -> dict:
    reduced, full = served.decode(data), reference.decode(data)
    served_top = np.argsort(-_logits(served, reduced))[:5]
    logits = _logits(reference, full)
    reference_top = np.argsort(-logits)[:5]
    probabilities = np.exp(logits - logits.max())
    probabilities /= probabilities.sum()
    shrunk = full
    if reduced.image.shape != full.image.shape:
        pixels = cv2.resize(full.image, reduced.image.shape[1::-1], interpolation=cv2.INTER_AREA)
        shrunk = image_codec.Decoded(pixels, full.height, full.width)
    area_top = np.argsort(-_logits(reference, shrunk))[:5]
    return {
        "name": name,
        "kind": kind,
        "reduced": reduced.image.shape != full.image.shape,
        "top1_agrees": bool(served_top[0] == reference_top[0]),
        "top5_overlap": len(set(served_top.tolist()) & set(reference_top.tolist())) / 5,
        "top1_agrees_area": bool(served_top[0] == area_top[0]),
        "reference_agrees_area": bool(reference_top[0] == area_top[0]),
        "reference_margin": float(probabilities[reference_top[0]] - probabilities[reference_top[1]]),
    }


def _summary(selected: list[dict]) -> dict[str, Any]:
    return {
        "count": len(selected),
        "top1_agreement": round(float(np.mean([r["top1_agrees"] for r in selected])), 4),
        "top5_overlap": round(float(np.mean([r["top5_overlap"] for r in selected])), 4),
        "reduced_decodes": sum(1 for r in selected if r["reduced"]),
        "top1_vs_area": round(float(np.mean([r["top1_agrees_area"] for r in selected])), 4),
        "full_vs_area": round(float(np.mean([r["reference_agrees_area"] for r in selected])), 4),
    }


def decode_gate(result: dict, made: list[tuple[str, str, bytes]], label: str, variant: inprocess.Variant) -> bool:
    """The gate rows of one variant of the served decode; True when it meets the gate."""
    served = inprocess.load(CLASSIFIER, variant)
    reference = inprocess.load(
        CLASSIFIER, inprocess.Variant(core_config="cpu_onnxruntime", decode="full", resize_reducing_gap=variant.resize_reducing_gap)
    )
    report.log(BENCHMARK, f"decode gate, {label}: {len(made)} images")
    compared = [_compare(served, reference, *item) for item in made]
    spec = served.spec
    settings = f"{served.runtime}, decode_oversampling {spec.decode_oversampling}, resize_reducing_gap {spec.resize_reducing_gap}"
    overall = _summary(compared)
    passed = overall["top1_agreement"] >= MIN_TOP1
    report.add(result, "decode_gate", variant=label, settings=settings, images="all", **overall, gate=passed)
    for kind in SIZES:
        report.add(
            result, "decode_gate", variant=label, settings=settings, images=kind, **_summary([r for r in compared if r["kind"] == kind])
        )
    margins = [r["reference_margin"] for r in compared]
    for r in compared:
        if not r["top1_agrees"]:
            report.add(
                result, "disagreements", variant=label, image=r["name"], kind=r["kind"], reference_margin=round(r["reference_margin"], 4)
            )
    result["notes"].append(
        f"Decode gate, {label}: median reference top-1 minus top-2 probability over all images {float(np.median(margins)):.3f}."
    )
    return passed


def decode_costs(result: dict, label: str, variant: inprocess.Variant, repeats: int) -> None:
    """Decode and preprocess CPU ms per image of one variant (one thread), web and phone photos."""
    served = inprocess.load(CLASSIFIER, variant)
    steps.one_thread()
    for mix in ("web", "phone"):
        costs = steps.served_costs(served, [p.data for p in images.upload_mix(mix)], repeats, core=False)
        report.add(result, "decode_costs", variant=label, mix=mix, decode=costs["decode"], preprocess=costs["preprocess"])


def declare_decode_tables(result: dict) -> None:
    report.table(
        result,
        "decode_gate",
        f"Decode gate: the served answer against FP32 onnxruntime with full-size decoding (gate: top-1 agreement >= {MIN_TOP1})",
        {"variant": "variant", "settings": "served", "images": "images", "count": "count", "top1_agreement": "top-1 agreement"}
        | {
            "top5_overlap": "top-5 overlap",
            "reduced_decodes": "decoded reduced",
            "top1_vs_area": "served vs area-shrunk full decode, top-1",
        }
        | {"full_vs_area": "full decode vs area-shrunk, top-1", "gate": "gate met"},
        "Held-out photos (the recipe's evaluation_photos) and augmentations at 12 MP (phone-like, half with EXIF orientation 6), "
        "2048 px and 1280 px. Reference: FP32 onnxruntime (configs/cpu_onnxruntime.pbtxt), the served decoder at full size.",
    )
    report.table(
        result,
        "disagreements",
        "Images whose served top-1 differs",
        {"variant": "variant", "image": "image", "kind": "size", "reference_margin": "reference top-1 minus top-2 probability"},
    )
    report.table(
        result,
        "decode_costs",
        "What decode and preprocess cost (CPU ms per image, one thread)",
        {"variant": "variant", "mix": "mix", "decode": "decode", "preprocess": "preprocess"},
    )


# ---------------------------------------------------------------------------- the decode bounds of other tasks

# What the reduced decode may move against the full decode, by gate metric (the lowest value over a mix's photos).
DECODE_BOUNDS = {"top1_agreement": 1.0, "matched_iou_min": 0.98, "images_with_the_same_count": 1.0, "foreground_iou_min": 0.99}
# A mask's foreground IoU counts where the photo shows something to segment (a person mask of 1 % or more of the photo).
MIN_FOREGROUND = 0.01
BOUND_METRICS = ("top1_agreement", "images_with_the_same_count", "matched_iou_min", "matched_iou_mean", "mean_iou", "foreground_iou_min")


def reduced_pipelines(names: list[str] | None) -> list[str]:
    """The pipelines (``names``, else all) whose image-to-tensor preprocess decodes JPEGs reduced."""
    from vision_serving import layout, preprocessing, preprocessors
    from vision_serving.pipeline_configs import PipelineConfigs

    chosen = []
    for pipeline in layout.pipelines(MODEL_REPOSITORY):
        if names and pipeline.name not in names:
            continue
        configs = PipelineConfigs.load(pipeline)
        if preprocessors.custom(configs.preprocess) is None and preprocessing.decode_minimum(configs.spec) is not None:
            chosen.append(pipeline.name)
    return chosen


def _agreement(reference: Any, candidate: Any, served: inprocess.BenchedPipeline) -> dict[str, Any]:
    """The task's gate metrics of ``candidate`` against ``reference`` (the foreground IoU over photos with a mask)."""
    task = served.configs.task
    metrics = dict(task.gate(reference, candidate, task.gate_defaults)["metrics"])
    if "foreground_iou_min" in metrics:
        from vision_serving.tasks import segmentation

        pairs = [(a, b) for a, b in zip(reference.thresholded(), candidate.thresholded()) if a.mean() >= MIN_FOREGROUND]
        metrics["foreground_iou_min"] = min((segmentation.iou(a, b) for a, b in pairs), default=1.0)
    return {key: round(float(metrics[key]), 4) for key in BOUND_METRICS if key in metrics}


def decode_bounds(result: dict, pipelines: list[str], repeats: int) -> None:
    """The rows of ``--decode-bounds``: each reduced pipeline and mix, served against full decoding (and the noise floor)."""
    from vision_serving import layout

    for name in pipelines:
        pipeline = layout.pipeline(name, MODEL_REPOSITORY)
        served = inprocess.load(pipeline)
        full = inprocess.load(pipeline, inprocess.Variant(decode_oversampling=0.0))
        oversampling = served.spec.decode_oversampling
        steps.one_thread()
        for mix in ("web", "phone"):
            payloads = [p.data for p in images.upload_mix(mix)]
            report.log(BENCHMARK, f"decode bounds, {name}, {mix}: {len(payloads)} photos")
            reference = full.run(payloads)
            compared = {"served (reduced) vs full decode": (reference, served.run(payloads))}
            if mix == "phone":
                other = [p.data for p in images.phone_payloads(noise_draw=1)]
                compared["full decode, another noise draw vs the first"] = (reference, full.run(other))
            costs = {
                label: steps.served_costs(variant, payloads, repeats, core=False) for label, variant in (("served", served), ("full", full))
            }
            for label, (first, second) in compared.items():
                metrics = _agreement(first, second, served)
                bounded = {key: value for key, value in metrics.items() if key in DECODE_BOUNDS}
                met = all(value >= DECODE_BOUNDS[key] for key, value in bounded.items()) if label.startswith("served") else None
                report.add(
                    result,
                    "decode_bounds",
                    pipeline=name,
                    mix=mix,
                    compared=label,
                    oversampling=oversampling,
                    photos=len(payloads),
                    **metrics,
                    decode_ms=round(costs["served" if label.startswith("served") else "full"]["decode"], 2),
                    full_decode_ms=round(costs["full"]["decode"], 2),
                    within_bounds=met,
                )


def declare_bounds_table(result: dict) -> None:
    bounds = ", ".join(f"{key} >= {value:g}" for key, value in DECODE_BOUNDS.items())
    report.table(
        result,
        "decode_bounds",
        "Reduced decoding against the full decode, by the task's own metrics",
        {"pipeline": "pipeline", "mix": "mix", "compared": "compared", "oversampling": "decode_oversampling", "photos": "photos"}
        | {key: key.replace("_", " ") for key in BOUND_METRICS}
        | {"decode_ms": "decode CPU ms/photo", "full_decode_ms": "full decode CPU ms/photo", "within_bounds": "within bounds"},
        f"Each pipeline as served against the same pipeline with decode_oversampling 0 (every photo decoded at full size: its "
        f"reference runtime's answer), on the web and phone upload mixes. Bounds: {bounds} (foreground IoU over photos whose "
        f"mask covers at least {MIN_FOREGROUND:.0%}). The noise-draw rows compare the full decode of the phone photos with "
        "the full decode of the same photos with another draw of their sensor-like noise: how far the answers move when only "
        "the noise changes. Decode: CPU ms per photo, one thread.",
    )


# ---------------------------------------------------------------------------- configuration A/B


def _config_file(repository: Path, pipeline: str, role: str) -> Path:
    """``role`` (preprocess, core, postprocess) of ``pipeline`` in the model repository ``repository``."""
    return model_config.config_path(layout.pipeline(pipeline, repository).model_dir(role), "cpu")


def apply_edit(repository: Path, pipeline: str, edit: str) -> None:
    """One ``role.key=value`` change to a config of ``pipeline`` in ``repository``."""
    target, _, value = edit.partition("=")
    role, _, key = target.strip().partition(".")
    path = _config_file(repository, pipeline, role)
    config = model_config.parse_config_text(path.read_text(), str(path))
    if key == "instances":
        config.instance_group[0].count = int(value)
    elif key == "delay_us":
        config.dynamic_batching.max_queue_delay_microseconds = int(value)
    elif key == "preferred":
        del config.dynamic_batching.preferred_batch_size[:]
        config.dynamic_batching.preferred_batch_size.extend(int(v) for v in value.split("/") if v)
    elif key == "max_batch":
        config.max_batch_size = int(value)
    elif key.startswith("param."):
        config.parameters[key[len("param.") :]].string_value = value
    else:
        raise ValueError(f"unknown key {key!r} in {edit!r}")
    path.write_text(text_format.MessageToString(config))


def prepare(name: str, spec: str, pipeline: str, work_dir: Path = WORK_DIR) -> Path:
    """The model repository of one variant: ``@PATH`` as it is, else a copy of ``pipeline`` with the edits."""
    if spec.startswith("@"):
        return Path(spec[1:]).resolve()
    destination = work_dir / "configs" / name
    if destination.exists():
        shutil.rmtree(destination)
    source = layout.pipeline(pipeline, MODEL_REPOSITORY)
    shutil.copytree(source.repository, destination / source.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for edit in filter(None, (item.strip() for item in spec.split(";"))):
        apply_edit(destination, pipeline, edit)
    return destination


def _server(repository: Path, pipeline: str, log_file: Path) -> LocalTritonServer:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    return LocalTritonServer(
        http_port=loadgen.free_port(),
        grpc_port=loadgen.free_port(),
        metrics_port=loadgen.free_port(),
        model_repository=repository,
        log_file=log_file,
        pipelines=[pipeline],
    )


@contextlib.contextmanager
def _servers(repositories: dict[str, Path], pipeline: str):
    """One server per named repository, all up for the whole block."""
    with contextlib.ExitStack() as stack:
        servers = {}
        for name, repository in repositories.items():
            server = _server(repository, pipeline, WORK_DIR / f"{name}.log")
            server.start()
            stack.callback(server.stop)
            servers[name] = server
        for server in servers.values():
            server.wait_ready(timeout_s=240)
        yield servers


def _ab_window(
    server: LocalTritonServer, pipeline: layout.Pipeline, payloads: list[bytes], concurrency: int, args: argparse.Namespace
) -> dict:
    models = [pipeline.name, *(pipeline.model_name(role) for role in layout.ROLES)]
    window = triton_stats.WindowStats(server.grpc_url, models)
    usage = cpu.WindowCPU(server.process.pid if server.process else None)

    def window_start() -> None:
        window.start()
        usage.start()

    def window_end() -> None:
        usage.end()
        window.end()

    url = server.grpc_url if args.protocol == "grpc" else server.http_url
    sender = senders.ensemble_sender(url, pipeline, payloads, protocol=args.protocol)
    measured = loadgen.closed_loop(sender, concurrency, args.warmup, args.window, window_start, window_end)
    measured.add_cpu(usage.server_s, usage.client_s)
    core = window.result.get(pipeline.model_name("core"), {})
    return {**measured.as_dict(), "core_batch": core.get("avg_batch"), "core_queue_ms": core.get("queue_ms")}


def configs_ab(result: dict, variants: dict[str, str], args: argparse.Namespace) -> None:
    """Every variant's server up at once; levels and variants measured in turn, round after round; medians."""
    report.table(
        result,
        "configs",
        "Configurations side by side (medians over the rounds)",
        {"variant": "variant", "edits": "edits", "concurrency": "c", "throughput": "median req/s", "rounds": "rounds req/s"}
        | {
            "p50_ms": "median p50 ms",
            "p99_ms": "median p99 ms",
            "core_batch": "core batch",
            "server_cpu_ms": "server CPU ms/req",
            "errors": "errors",
        },
        "One server per variant, all up for the whole comparison; variants measured in turn, round after round.",
    )
    pipeline = layout.pipeline(args.pipeline)
    payloads = [p.data for p in images.upload_mix("web")]
    repositories = {name: prepare(name, spec, args.pipeline) for name, spec in variants.items()}
    measured: dict[tuple[str, int], list[dict]] = {(name, c): [] for name in variants for c in args.concurrency}
    with _servers(repositories, args.pipeline) as servers:
        for round_index in range(args.rounds):
            for concurrency in args.concurrency:
                for name, server in servers.items():
                    row = _ab_window(server, layout.pipeline(args.pipeline, repositories[name]), payloads, concurrency, args)
                    measured[name, concurrency].append(row)
                    report.log(BENCHMARK, f"round {round_index + 1} c={concurrency:<3d} {name:20s} {row['throughput']:7.1f} req/s")
    for (name, concurrency), rounds in measured.items():

        def median(key: str, rounds: list[dict] = rounds) -> float:
            return statistics.median(r[key] or 0 for r in rounds)

        report.add(
            result,
            "configs",
            variant=name,
            edits=variants[name] or "(as served)",
            concurrency=concurrency,
            throughput=median("throughput"),
            rounds=[round(r["throughput"], 1) for r in rounds],
            p50_ms=median("p50_ms"),
            p99_ms=median("p99_ms"),
            core_batch=median("core_batch"),
            server_cpu_ms=median("server_cpu_ms_per_request"),
            errors=sum(r["errors"] for r in rounds),
            pipeline=pipeline.name,
        )


# ---------------------------------------------------------------------------- overload


def without_queue_policy(source: Path, destination: Path) -> Path:
    """A copy of the model repository whose models have no ``default_queue_policy`` (unbounded queues)."""
    loadgen.copy_repository(source, destination)
    for path in [*destination.glob("*/*/config.pbtxt"), *destination.glob("*/*/configs/*.pbtxt")]:
        config = model_config.parse_config_text(path.read_text(), str(path))
        if config.HasField("dynamic_batching"):
            config.dynamic_batching.ClearField("default_queue_policy")
            path.write_text(text_format.MessageToString(config))
    return destination


def overload_summary(outcomes: list[loadgen.Outcome], duration_s: float, succeeded_by_model: dict[str, int]) -> dict:
    accepted = [o.latency_s for o in outcomes if o.ok]
    rejected = [o for o in outcomes if not o.ok]
    statuses: dict[str, int] = {}
    for outcome in rejected:
        status = (outcome.error or "").split(":", 1)[0]
        statuses[status] = statuses.get(status, 0) + 1
    accepted_ms, rejected_ms = loadgen.percentiles(accepted), loadgen.percentiles([o.latency_s for o in rejected])
    return {
        "requests": len(outcomes),
        "accepted_rps": round(len(accepted) / duration_s, 1),
        "accepted_p50_ms": accepted_ms["p50_ms"],
        "accepted_p99_ms": accepted_ms["p99_ms"],
        "rejected_share": round(len(rejected) / len(outcomes), 3) if outcomes else None,
        "rejected_p99_ms": rejected_ms["p99_ms"],
        "statuses": statuses,
        "error_samples": sorted({(o.error or "")[:200] for o in rejected})[:3],
        "completed_by_step": list(succeeded_by_model.values()),
    }


def overload(result: dict, clients: list[int], duration_s: float, pipeline_name: str) -> None:
    """The served repository against a copy without queue policies, at each number of clients."""
    report.table(
        result,
        "overload",
        "Overload: bounded (served) against unbounded queues (raw tritonclient, no retries)",
        {"pipeline": "pipeline", "clients": "clients", "queues": "queues", "accepted_rps": "accepted req/s"}
        | {"accepted_p50_ms": "accepted p50 ms", "accepted_p99_ms": "accepted p99 ms", "rejected_share": "rejected share"}
        | {"rejected_p99_ms": "rejected p99 ms", "statuses": "statuses", "completed_by_step": "requests each step completed"},
        f"Each number of clients sends back to back for {duration_s:g} s; a rejected client pauses 50 ms, as a client backing off would.",
    )
    payloads = [p.data for p in images.upload_mix("web")]
    with tempfile.TemporaryDirectory(prefix="whatif-overload-") as scratch:
        repositories = {
            "bounded": MODEL_REPOSITORY,
            "unbounded": without_queue_policy(MODEL_REPOSITORY, Path(scratch) / "model_repository"),
        }
        for kind, repository in repositories.items():
            pipeline = layout.pipeline(pipeline_name, repository)
            models = [pipeline.model_name(role) for role in layout.ROLES]
            with _servers({f"overload_{kind}": repository}, pipeline_name) as servers:
                (server,) = servers.values()
                for count in clients:
                    report.log(BENCHMARK, f"overload, {kind} queues, {count} clients")
                    before = triton_stats.snapshot(grpcclient.InferenceServerClient(server.grpc_url), models)
                    generator = loadgen.LoadGenerator(
                        concurrency=count, make_sender=senders.ensemble_sender(server.grpc_url, pipeline, payloads)
                    )
                    generator.start()
                    time.sleep(duration_s)
                    load = generator.stop()
                    after = triton_stats.snapshot(grpcclient.InferenceServerClient(server.grpc_url), models)
                    succeeded = {m: after[m]["success_count"] - before.get(m, {}).get("success_count", 0) for m in models}
                    summary = overload_summary(load.outcomes, load.duration_s, succeeded)
                    report.add(result, "overload", pipeline=pipeline_name, clients=count, queues=kind, **summary)


# ---------------------------------------------------------------------------- a drift reference from the user's traffic


def drift_reference(result: dict, reference_count: int, window_count: int) -> None:
    from benchmarks import drift_traffic

    report.table(
        result,
        "drift_reference",
        "Drift: day-one p-values of the product's traffic against each reference",
        {"model": "model", "feature": "feature", "held_out": "held-out reference p", "user": "user reference p"},
        f"A window of {window_count} traffic images; the user reference is built from {reference_count} other ones "
        "(builders drift-reference --photos). Small p-values on the held-out reference are the product's own difference, not drift.",
    )
    report.log(BENCHMARK, f"drift reference: {reference_count} reference photos, window {window_count}")
    for row in drift_traffic.p_value_rows(reference_count, window_count):
        report.add(result, "drift_reference", **row)


# ---------------------------------------------------------------------------- the command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.whatif", description=__doc__.split("\n\n")[0])
    parser.add_argument("--decode-gate", action="store_true", help="the served decode's gate (the default what-if)")
    parser.add_argument("--decode-bounds", action="store_true", help="reduced decoding of every other pipeline against its full decode")
    parser.add_argument("--pipelines", default="", help="--decode-bounds: comma-separated pipelines (default: every one that reduces)")
    parser.add_argument("--oversampling", type=float, action="append", default=[], help="what-if: another decode_oversampling")
    parser.add_argument("--reducing-gap", type=float, action="append", default=[], help="what-if: another resize_reducing_gap (0: off)")
    parser.add_argument("--per-photo", type=int, default=12, help="decode gate: augmentations per held-out photo (default 12)")
    parser.add_argument("--repeats", type=int, default=3, help="decode costs: passes per figure (the best counts)")
    parser.add_argument("--configs", nargs="+", metavar="NAME=EDITS", help="what-if: serving configurations side by side")
    parser.add_argument("--pipeline", default=CLASSIFIER.name, help="--configs, --overload: the pipeline (default %(default)s)")
    parser.add_argument("--concurrency", type=report.int_list, default=[16], help="--configs: levels (default 16)")
    parser.add_argument("--rounds", type=int, default=3, help="--configs: rounds (default 3)")
    parser.add_argument("--window", type=float, default=5.0, help="--configs: measurement window, seconds (default 5)")
    parser.add_argument("--warmup", type=float, default=2.0, help="--configs: warm-up, seconds (default 2)")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--overload", type=report.int_list, metavar="CLIENTS,...", help="what-if: unbounded queues at these many clients")
    parser.add_argument("--overload-duration", type=float, default=20.0, help="--overload: seconds per run (default 20)")
    parser.add_argument("--drift-reference", action="store_true", help="what-if: a drift reference built from the user's traffic")
    parser.add_argument("--reference", type=int, default=256, help="--drift-reference: traffic photos the user reference is built from")
    parser.add_argument("--drift-window", type=int, default=512, help="--drift-reference: images in the tested window")
    report.add_output_arguments(parser, BENCHMARK)
    args = parser.parse_args(argv)
    if args.per_photo < 0:
        parser.error("--per-photo must be >= 0")
    if not (
        args.decode_gate
        or args.decode_bounds
        or args.oversampling
        or args.reducing_gap
        or args.configs
        or args.overload
        or args.drift_reference
    ):
        args.decode_gate = True
    try:
        args.variants = dict(item.split("=", 1) for item in args.configs or [])
    except ValueError:
        parser.error("--configs: each variant is NAME=EDITS (NAME= for the repository as it is)")
    args.output = args.output or report.RESULTS_DIR
    return args


def decode_variants(args: argparse.Namespace) -> dict[str, inprocess.Variant]:
    variants = {"served": inprocess.Variant()} if (args.decode_gate or args.oversampling or args.reducing_gap) else {}
    variants |= {f"decode_oversampling {value:g}": inprocess.Variant(decode_oversampling=value) for value in args.oversampling}
    variants |= {f"resize_reducing_gap {value:g}": inprocess.Variant(resize_reducing_gap=value) for value in args.reducing_gap}
    return variants


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if report.rendered_only(args, BENCHMARK):
        return 0
    settings = {
        key: getattr(args, key) for key in ("per_photo", "pipeline", "concurrency", "rounds", "window", "overload", "overload_duration")
    }
    settings |= {"variants": args.variants, "decode": list(decode_variants(args)), "drift_reference": args.drift_reference}
    settings |= {"decode_bounds": args.decode_bounds, "pipelines": args.pipelines}
    result = report.new(
        BENCHMARK, "What-ifs: the served configuration against changed ones", report.command_line("benchmarks.whatif", argv), settings
    )
    served_passes = True
    variants = decode_variants(args)
    if variants:
        declare_decode_tables(result)
        made = held_out_images(args.per_photo)
        for label, variant in variants.items():
            passed = decode_gate(result, made, label, variant)
            served_passes = passed if label == "served" else served_passes
            if args.oversampling or args.reducing_gap:
                decode_costs(result, label, variant, args.repeats)
    if args.decode_bounds:
        declare_bounds_table(result)
        decode_bounds(result, reduced_pipelines([name for name in args.pipelines.split(",") if name]), args.repeats)
    if args.variants:
        configs_ab(result, args.variants, args)
    if args.overload:
        overload(result, args.overload, args.overload_duration, args.pipeline)
    if args.drift_reference:
        drift_reference(result, args.reference, args.drift_window)
    written = report.write(report.finish(result), args.output)
    report.log(BENCHMARK, f"after {result['elapsed_s']:.0f} s: {', '.join(map(str, written))}")
    print(report.markdown(result))
    return 0 if served_passes else 1


if __name__ == "__main__":
    sys.exit(main())
