"""Soak: every pipeline served under mixed traffic for a long while, the server's memory sampled throughout.

    .venv/bin/python -m benchmarks.soak [--duration 1800] [--warmup 180] [--clients 12] [--bad-share 0.1]
        [--pipelines all] [--interval 10] [--output DIR]

One local tritonserver serves the pipelines (``configs/cpu.pbtxt``). ``--clients`` closed-loop gRPC
clients each send one upload per request to a pipeline drawn at random: a package photo (``builders.photos``)
cropped to a random aspect ratio and resized to a random longer side between 120 and 4000 px (every few
requests a 12 MP phone photo), JPEG at quality 70-95 or PNG, so that the text detector sees a new input shape
nearly every time and the decoders every scale; ``--bad-share`` of the uploads are broken (cut short,
another format, garbage) and must be refused with INVALID_ARG. Every answer is checked: the pipeline's
outputs for one image, or the refusal a bad upload must get.

Every ``--interval`` seconds the resident memory (RSS) of tritonserver and of each Python-backend instance
is sampled, and the server's /dev/shm. The memory is flat when, after ``--warmup``, it no longer grows:
the report gives each process's RSS after warm-up, at the end, its peak and its growth over the second
half of the run, and the whole server's RSS a minute at a time.

Results: ``soak.json`` and ``soak.md`` in ``--output`` (benchmarks/results by default).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from typing import Any

import cv2
import numpy as np
import tritonclient.grpc as grpcclient

from benchmarks import images, report, senders
from builders import photos
from devtools import loadgen
from devtools.triton_server import BUILD_DIR, MODEL_REPOSITORY, LocalTritonServer
from vision_serving import layout, model_config

BENCHMARK = "soak"
POOL = 240  # distinct uploads, drawn at random by every client
PHONE_EVERY = 12  # one upload in this many is a 12 MP phone photo
MIN_SIDE, MAX_SIDE = 120, 4000
BAD_KINDS = ("cut", "gif", "garbage")
MINUTE_S = 60.0


class Upload:
    def __init__(self, name: str, data: bytes, bad: bool) -> None:
        self.name, self.data, self.bad = name, data, bad


def make_uploads(count: int, bad_share: float, seed: int = 0) -> list[Upload]:
    """``count`` uploads of random sizes and formats, ``bad_share`` of them broken."""
    rng = np.random.default_rng(seed)
    sources = [cv2.imread(str(path), cv2.IMREAD_COLOR) for path in photos.registry().values()]
    phones = images.phone_payloads()
    uploads = []
    for index in range(count):
        if index % PHONE_EVERY == 0:
            phone = phones[(index // PHONE_EVERY) % len(phones)]
            uploads.append(Upload(phone.name, phone.data, False))
            continue
        source = sources[int(rng.integers(len(sources)))]
        height, width = source.shape[:2]
        aspect = float(np.exp(rng.uniform(np.log(0.4), np.log(2.5))))  # width / height of the crop
        crop_width = min(width, int(height * aspect))
        crop_height = min(height, int(crop_width / aspect))
        top, left = int(rng.integers(height - crop_height + 1)), int(rng.integers(width - crop_width + 1))
        crop = source[top : top + crop_height, left : left + crop_width]
        longer = int(rng.integers(MIN_SIDE, MAX_SIDE + 1))
        scale = longer / max(crop.shape[:2])
        size = (max(1, round(crop.shape[1] * scale)), max(1, round(crop.shape[0] * scale)))
        resized = cv2.resize(crop, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC)
        if rng.random() < 0.15:
            data = cv2.imencode(".png", resized)[1].tobytes()
        else:
            data = cv2.imencode(".jpg", resized, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(70, 96))])[1].tobytes()
        name = f"{size[0]}x{size[1]}"
        if rng.random() < bad_share:
            kind = BAD_KINDS[int(rng.integers(len(BAD_KINDS)))]
            broken = {"cut": data[: len(data) // 2], "gif": b"GIF89a" + data[6:200], "garbage": rng.bytes(2048)}[kind]
            uploads.append(Upload(f"{name}/{kind}", broken, True))
        else:
            uploads.append(Upload(name, data, False))
    return uploads


def sender(url: str, pipelines: list[layout.Pipeline], uploads: list[Upload]) -> loadgen.SenderFactory:
    """A client sending random uploads to random pipelines; a bad upload must be refused with INVALID_ARG."""
    facts = []
    for pipeline in pipelines:
        ensemble = model_config.load_config(pipeline.ensemble_dir)
        facts.append((pipeline.name, model_config.image_input_name(ensemble), senders.output_names(pipeline)))

    def factory(worker: int) -> loadgen.Sender:
        client = grpcclient.InferenceServerClient(url)
        draw = random.Random(worker)

        def send(request: int) -> str:
            name, image_input, outputs = facts[draw.randrange(len(facts))]
            upload = uploads[draw.randrange(len(uploads))]
            tensor = grpcclient.InferInput(image_input, [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[upload.data]], dtype=np.object_))
            try:
                result = client.infer(name, [tensor], client_timeout=senders.CLIENT_TIMEOUT_S)
            except Exception as error:
                if upload.bad and "INVALID_ARG" in loadgen.status_of(error):
                    return f"{name}: refused"
                raise
            if upload.bad:
                raise loadgen.WrongAnswer(f"{name}: the broken upload {upload.name} was answered")
            senders.check_answer(result.as_numpy, outputs)
            return f"{name}: answered"

        return send

    return factory


def _mib(value: float) -> float:
    return round(value / 2**20, 1)


def measure(result: dict[str, Any], args: argparse.Namespace) -> int:
    chosen = [name for name in args.pipelines.split(",") if name] if args.pipelines != "all" else []
    pipelines = [layout.pipeline(name, MODEL_REPOSITORY) for name in chosen] or layout.pipelines(MODEL_REPOSITORY)
    uploads = make_uploads(POOL, args.bad_share)
    report.log(BENCHMARK, f"{len(uploads)} uploads ({sum(u.bad for u in uploads)} broken), {len(pipelines)} pipelines")
    server = LocalTritonServer(
        http_port=loadgen.free_port(),
        grpc_port=loadgen.free_port(),
        metrics_port=loadgen.free_port(),
        pipelines=[pipeline.name for pipeline in pipelines],
        log_file=BUILD_DIR / "bench" / "soak-tritonserver.log",
    )
    server.log_file.parent.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
    server.start()
    try:
        server.wait_ready(600)
        assert server.process is not None
        sampler = loadgen.ResourceSampler(server.process.pid, interval_s=args.interval).start()
        generator = loadgen.LoadGenerator(
            concurrency=args.clients, make_sender=sender(server.grpc_url, pipelines, uploads), error_pause_s=0.0
        ).start()
        started = time.monotonic()
        while time.monotonic() - started < args.duration:
            time.sleep(min(MINUTE_S, args.duration - (time.monotonic() - started)))
            done = len(generator.outcomes)
            report.log(
                BENCHMARK, f"{time.monotonic() - started:.0f} s: {done} requests, server {_mib(sum(sampler.samples[-1].rss.values()))} MiB"
            )
        outcomes = generator.stop().outcomes
        samples = sampler.stop()
    finally:
        server.stop()
    failures = [o for o in outcomes if not o.ok]
    answered = Counter(o.label for o in outcomes if o.ok)
    result["notes"].append(
        f"{len(outcomes)} requests in {args.duration:.0f} s: "
        + ", ".join(f"{label} {count}" for label, count in sorted(answered.items()))
        + f"; {len(failures)} failed"
        + (f" (first: {failures[0].error})" if failures else "")
    )
    warm = [s for s in samples if s.t_s >= args.warmup] or samples[-1:]
    half = [s for s in warm if s.t_s >= (warm[0].t_s + samples[-1].t_s) / 2] or warm[-1:]
    for process in sorted(samples[-1].rss):
        report.add(
            result,
            "processes",
            process=process,
            after_warmup_mib=_mib(warm[0].rss.get(process, 0)),
            end_mib=_mib(samples[-1].rss.get(process, 0)),
            peak_mib=_mib(max(s.rss.get(process, 0) for s in samples)),
            second_half_growth_mib=_mib(samples[-1].rss.get(process, 0) - half[0].rss.get(process, 0)),
        )
    total = [(s.t_s, sum(s.rss.values()), s.shm_bytes) for s in samples]
    report.add(
        result,
        "processes",
        process="server (all processes)",
        after_warmup_mib=_mib(sum(warm[0].rss.values())),
        end_mib=_mib(total[-1][1]),
        peak_mib=_mib(max(t[1] for t in total)),
        second_half_growth_mib=_mib(total[-1][1] - sum(half[0].rss.values())),
    )
    minute = 0.0
    for t_s, rss, shm in total:
        if t_s >= minute:
            report.add(result, "curve", minute=round(t_s / MINUTE_S, 1), server_rss_mib=_mib(rss), shm_mib=_mib(shm))
            minute += MINUTE_S
    return 1 if failures else 0


def declare_tables(result: dict[str, Any], args: argparse.Namespace) -> None:
    report.table(
        result,
        "processes",
        "Resident memory of each process (MiB)",
        {"process": "process", "after_warmup_mib": f"after {args.warmup:.0f} s", "end_mib": "at the end"}
        | {"peak_mib": "peak", "second_half_growth_mib": "growth over the second half"},
        "Python-backend instances by Triton's instance name; RSS counts the shared memory a process has touched, "
        "so /dev/shm appears in each instance that mapped it.",
    )
    report.table(
        result,
        "curve",
        "The whole server's memory, a minute at a time (MiB)",
        {"minute": "minute", "server_rss_mib": "RSS, all processes", "shm_mib": "/dev/shm"},
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1800.0, help="seconds of traffic (default 1800)")
    parser.add_argument("--warmup", type=float, default=180.0, help="seconds before memory is expected flat (default 180)")
    parser.add_argument("--clients", type=int, default=12, help="closed-loop clients (default 12)")
    parser.add_argument("--bad-share", type=float, default=0.1, help="share of broken uploads (default 0.1)")
    parser.add_argument("--pipelines", default="all", help="comma-separated pipelines, or all (default)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between memory samples (default 10)")
    report.add_output_arguments(parser, BENCHMARK)
    args = parser.parse_args(argv)
    if not 0 <= args.bad_share < 1 or args.clients < 1 or args.duration <= 0:
        parser.error("--bad-share must be in [0, 1), --clients and --duration positive")
    args.output = args.output or report.RESULTS_DIR
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if report.rendered_only(args, BENCHMARK):
        return 0
    settings = {key: getattr(args, key) for key in ("duration", "warmup", "clients", "bad_share", "pipelines", "interval")}
    result = report.new(BENCHMARK, "Soak: memory under mixed traffic", report.command_line("benchmarks.soak", argv), settings)
    declare_tables(result, args)
    status = measure(result, args)
    written = report.write(report.finish(result), args.output)
    report.log(BENCHMARK, f"after {result['elapsed_s']:.0f} s: {', '.join(map(str, written))}")
    print(report.markdown(result))
    return status


if __name__ == "__main__":
    sys.exit(main())
