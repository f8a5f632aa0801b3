"""Coverage-guided fuzzing of the upload path: atheris (libFuzzer for Python), a target per format.

Each target hands the fuzzer's bytes to :func:`vision_serving.preprocessing.decode_payloads`, what the
served preprocess calls on every upload, with the served limits (the image_classifier preprocess's) and,
by the input's last bit, the decode minimum the classifier's reduced JPEG decoding uses or none (a full
decode, as the text reader's preprocess decodes). Only two outcomes pass:

- a decoded RGB ``uint8`` image within the limits, its size the one declared (or a DCT scale of it);
- an :class:`~vision_serving.image_codec.ImageError`, the project's refusal.

Anything else fails: another exception (its traceback), a native crash (libFuzzer's signal handler), an
input past libFuzzer's ``-timeout``, or one whose decode took more CPU than :func:`budget_s` allows for
its declared pixels, :data:`BUDGET_MULTIPLE` times what a valid photo of as many pixels costs (measured at
start on a photo of the format) plus :data:`BUDGET_FLOOR_S`. libFuzzer writes the failing input to the
artifact directory (``crash-<sha1>``); each one found becomes a regression test
(tests/unit/vision_serving/test_codec_fuzzing.py).

Coverage is the Python code of ``vision_serving`` (instrumented at import: the structural walks, the
HEIF box parser, the decode wrappers). The decoders themselves (libpng, libjpeg-turbo, libwebp, libheif,
libavif) are the wheels' binaries, not built with coverage: the fuzzer mutates their inputs blind, and
their crashes and slow inputs are still caught.

    .venv/bin/python -m devtools.fuzz_codec png --seconds 600        # a campaign (docs/design.md records one)
    .venv/bin/python -m devtools.fuzz_codec jpeg --runs 2000         # a number of inputs
    .venv/bin/python -m devtools.fuzz_codec png --reproduce FILE     # one input, as the target judges it

Seeds: the committed corpus (tests/support/fuzz_seeds/<format>/, written by tests/support/upload_seeds.py
from real encoders); new inputs go to ``--corpus`` (default a temporary folder), never into the seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported by the fuzzer itself, inside atheris's instrumentation (see fuzz)
    from vision_serving.image_codec import Decoded, ImageLimits, MinimumSize

ROOT = Path(__file__).resolve().parent.parent
SEEDS_DIR = ROOT / "tests" / "support" / "fuzz_seeds"
# What the targets found, each a regression test (tests/unit/vision_serving/test_codec_fuzzing.py): <format>/<name>.
FINDINGS_DIR = ROOT / "tests" / "support" / "fuzz_findings"
FORMATS = ("jpeg", "png", "webp", "heic", "avif")
# The per-input CPU budget: this many times a valid photo of the declared pixels, plus a floor (the structural walk
# of a 20 MB payload, the interpreter's noise).
BUDGET_MULTIPLE = 5.0
BUDGET_FLOOR_S = 0.25
# libFuzzer's own per-input wall-clock limit (a native hang), seconds.
HANG_TIMEOUT_S = 20
# The pipeline whose preprocess limits and decode minimum the targets use.
PIPELINE = "image_classifier"
# What libFuzzer's final statistics and progress lines are parsed into (the campaign's record).
STAT_KEYS = ("number_of_executed_units", "average_exec_per_sec", "new_units_added", "peak_rss_mb")


class SlowInput(Exception):
    """An input whose decode cost more CPU than its declared pixels allow."""


class WrongResult(Exception):
    """A decode that returned something other than an RGB image within the limits."""


@dataclass
class Target:
    """One format's fuzz target: the served limits, a decode minimum, and the CPU a valid pixel of the format costs."""

    image_format: str
    limits: ImageLimits
    minimum: MinimumSize | None
    seconds_per_pixel: float

    def budget_s(self, data: bytes) -> float:
        from vision_serving import image_codec

        try:
            width, height = image_codec.declared_size(data, image_codec.sniff_format(data) or self.image_format)
        except (image_codec.ImageError, ValueError, IndexError):
            width = height = 0
        pixels = min(width * height, self.limits.max_pixels)
        return BUDGET_FLOOR_S + BUDGET_MULTIPLE * self.seconds_per_pixel * pixels

    def __call__(self, data: bytes) -> None:
        from vision_serving import image_codec, preprocessing

        minimum = self.minimum if data and data[-1] & 1 else None
        payloads = np.array([[data]], dtype=object)
        started = time.thread_time()
        try:
            (decoded,) = preprocessing.decode_payloads(payloads, self.limits, minimum)
        except image_codec.ImageError:
            decoded = None
        spent = time.thread_time() - started
        if spent > (budget := self.budget_s(data)):
            raise SlowInput(f"{self.image_format}: {len(data)} bytes took {spent:.3f} s of CPU, over the budget of {budget:.3f} s")
        if decoded is not None:
            check_decoded(decoded, self.limits)


def check_decoded(decoded: Decoded, limits: ImageLimits) -> None:
    """A decoded upload is 8-bit RGB within the limits and the size it declared (or a DCT scale of it)."""
    image = decoded.image
    if image.dtype.name != "uint8" or image.ndim != 3 or image.shape[2] != 3 or not image.flags.c_contiguous:
        raise WrongResult(f"decoded {image.dtype} {image.shape}")
    if decoded.width * decoded.height > limits.max_pixels or max(decoded.width, decoded.height) > limits.max_side:
        raise WrongResult(f"decoded a {decoded.width}x{decoded.height} photo, over the limits")
    if image.shape[0] > decoded.height or image.shape[1] > decoded.width:
        raise WrongResult(f"pixels of {image.shape[1]}x{image.shape[0]} for a {decoded.width}x{decoded.height} photo")


def calibration_photo(image_format: str) -> bytes:
    """A valid photo of the format, what a valid pixel costs to decode is measured on: 1024 x 683, or for HEIC
    and AVIF the largest seed (600 x 400: their encoders live in another environment; the decoder's fixed cost
    then counts per pixel, and the budget is the more lenient)."""
    import cv2

    from builders import photos

    if image_format in ("heic", "avif"):
        return max((path.read_bytes() for path in seeds(image_format)), key=len)
    bgr = cv2.resize(cv2.imdecode(np.frombuffer(photos.photo_bytes("coffee"), np.uint8), cv2.IMREAD_COLOR), (1024, 683))
    if image_format == "jpeg":
        return cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
    if image_format == "png":
        return cv2.imencode(".png", bgr)[1].tobytes()
    return cv2.imencode(".webp", bgr, [cv2.IMWRITE_WEBP_QUALITY, 80])[1].tobytes()


def make_target(image_format: str) -> Target:
    from vision_serving import layout, model_config, preprocessing

    preprocessing.set_threads(1)
    config = model_config.load_config(layout.pipeline(PIPELINE).model_dir("preprocess"))
    limits = preprocessing.limits_from_config(config)
    minimum = preprocessing.decode_minimum(preprocessing.PreprocessSpec.from_config(config))
    payloads = np.array([[calibration_photo(image_format)]], dtype=object)
    decoded = preprocessing.decode_payloads(payloads, limits)[0]
    costs = []
    for _ in range(3):
        started = time.thread_time()
        preprocessing.decode_payloads(payloads, limits)
        costs.append(time.thread_time() - started)
    return Target(image_format, limits, minimum, min(costs) / (decoded.width * decoded.height))


def seeds(image_format: str) -> list[Path]:
    return sorted((SEEDS_DIR / image_format).glob(f"*.{image_format}"))


def fuzz(image_format: str, libfuzzer_arguments: list[str]) -> None:
    """Run libFuzzer in this process (it exits the process when done)."""
    import atheris

    with atheris.instrument_imports(include=["vision_serving"]):
        from vision_serving import heif, image_codec, preprocessing  # noqa: F401  (and what they import: image_structure)

    target = make_target(image_format)
    atheris.Setup([sys.argv[0], *libfuzzer_arguments], target)
    atheris.Fuzz()


@dataclass(frozen=True)
class RunResult:
    image_format: str
    returncode: int
    seconds: float
    stats: dict[str, float]
    coverage: int  # libFuzzer's "cov:" on its last progress line (instrumented edges reached)
    features: int  # its "ft:"
    corpus_size: int
    artifacts: tuple[Path, ...]
    log_tail: str


def run(
    image_format: str,
    seconds: float | None = None,
    runs: int | None = None,
    corpus: Path | None = None,
    artifacts: Path | None = None,
    timeout_s: float | None = None,
) -> RunResult:
    """One fuzzing run in a child process (the fuzzer exits its process; a native crash must not end the caller)."""
    if image_format not in FORMATS:
        raise ValueError(f"unknown format {image_format!r}; known: {', '.join(FORMATS)}")
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{image_format}-") as scratch:
        corpus = corpus or Path(scratch) / "corpus"
        artifacts = artifacts or Path(scratch) / "artifacts"
        corpus.mkdir(parents=True, exist_ok=True)
        artifacts.mkdir(parents=True, exist_ok=True)
        arguments = [f"-artifact_prefix={artifacts}/", f"-timeout={HANG_TIMEOUT_S}", "-rss_limit_mb=4096", "-print_final_stats=1"]
        arguments += [f"-max_total_time={max(1, round(seconds))}"] if seconds else []
        arguments += [f"-runs={runs}"] if runs else []
        arguments += ["-max_len=262144", str(corpus), str(SEEDS_DIR / image_format)]
        command = [sys.executable, "-m", "devtools.fuzz_codec", image_format, "--libfuzzer", *arguments]
        started = time.monotonic()
        environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        completed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=environment, timeout=timeout_s, check=False)
        log = completed.stdout + completed.stderr
        found = tuple(sorted(artifacts.iterdir()))
        kept = tuple(_keep(path) for path in found)
        return RunResult(
            image_format,
            completed.returncode,
            round(time.monotonic() - started, 1),
            _final_stats(log),
            _last_progress(log, "cov"),
            _last_progress(log, "ft"),
            len(list(corpus.iterdir())),
            kept,
            log[-4000:],
        )


def _keep(path: Path) -> Path:
    """A finding copied out of the run's temporary folder (to the system's temporary directory)."""
    kept = Path(tempfile.gettempdir()) / f"fuzz-finding-{path.name}"
    kept.write_bytes(path.read_bytes())
    return kept


def _final_stats(log: str) -> dict[str, float]:
    stats = {}
    for line in log.splitlines():
        if line.startswith("stat::"):
            key, _, value = line.removeprefix("stat::").partition(":")
            if key.strip() in STAT_KEYS:
                stats[key.strip()] = float(value)
    return stats


def _last_progress(log: str, key: str) -> int:
    """The last ``key: N`` of libFuzzer's progress lines (``#123 NEW cov: 456 ft: 789 corp: ...``)."""
    value = 0
    for line in log.splitlines():
        if line.startswith("#") and f" {key}: " in line:
            value = int(line.split(f" {key}: ", 1)[1].split()[0])
    return value


def reproduce(image_format: str, path: Path) -> int:
    target = make_target(image_format)
    data = path.read_bytes()
    try:
        target(data)
    except (SlowInput, WrongResult) as error:
        print(f"{path}: {type(error).__name__}: {error}")
        return 1
    print(f"{path}: passes (a decoded image or an ImageError, within {target.budget_s(data):.3f} s of CPU)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) >= 2 and argv[1] == "--libfuzzer":
        fuzz(argv[0], argv[2:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m devtools.fuzz_codec", description=__doc__.split("\n\n")[0])
    parser.add_argument("format", choices=FORMATS)
    parser.add_argument("--seconds", type=float, help="how long to fuzz")
    parser.add_argument("--runs", type=int, help="how many inputs to run")
    parser.add_argument("--corpus", type=Path, help="where the inputs the fuzzer keeps go (default: a temporary folder)")
    parser.add_argument("--artifacts", type=Path, help="where failing inputs go (default: copied to the temporary directory)")
    parser.add_argument("--reproduce", type=Path, help="judge one input as the target does")
    options = parser.parse_args(argv)
    if options.reproduce:
        return reproduce(options.format, options.reproduce)
    if not options.seconds and not options.runs:
        parser.error("give --seconds or --runs")
    result = run(options.format, options.seconds, options.runs, options.corpus, options.artifacts)
    summary = {key: value for key, value in vars(result).items() if key != "log_tail"}
    summary["artifacts"] = [str(path) for path in result.artifacts]
    print(json.dumps(summary, indent=1))
    if result.returncode != 0 or result.artifacts:
        print(result.log_tail, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
