"""``python -m builders drift-reference --pipeline NAME``: the drift monitors' reference sample.

The precision ladder's held-out photos and their seeded augmentations (the same set and seed as
``select-precision``: :class:`builders.precision.HeldOut`), encoded as a client would send them,
go through the served code path in-process: the preprocess model's decode and preprocessing, the
core ONNX as the CPU default config (``configs/cpu.pbtxt``) serves it on onnxruntime, and the
postprocess model's task computation. :mod:`vision_serving.drift` extracts the served models'
features from each batch, and the values are written to
``<pipeline>_core/<version>/drift_reference.json`` (the highest numeric version, what Triton
serves), one entry per model, beside its provenance record. Rebuilt when the ONNX, the configs,
the photos, the feature code or the libraries change; otherwise skipped.

``--photos DIR [--limit N]`` builds it from the user's own representative photos instead (every
file under DIR, recursively, hidden ones left out; ``--limit`` takes N of them, a seeded random
choice): the same served path, no augmentation; files the served decoder refuses are counted and
reported in one line; fewer than ``drift_min_samples`` usable photos is a user error. Its
provenance records the photo set (count and a hash of names and contents), and such a reference
is never replaced by the held-out one: without ``--photos`` (``all``, ``build_artifacts``,
``--force`` included) it is kept while the model, configs (drift parameters aside) and feature
code are the ones it was built with; once they change, :class:`StaleUserReference` says in one
line to rebuild it with ``--photos`` (this step: exit 2; ``all`` and ``build_artifacts`` keep
the file and warn).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from builders import BuildError, Log, calibration, provenance, stderr_logger
from builders.artifacts import atomic_write_bytes, input_hash, package_versions, sha256_file
from builders.loaded import LoadedPipeline
from vision_serving import core_model, cpu_runtimes, drift, image_codec, layout, model_config
from vision_serving.served import SERVED_CORE_CONFIG, ServedPipeline

log_to_stderr = stderr_logger("drift-reference")
STEP = "drift-reference"
# The core config whose runtime and ONNX the reference is computed with: the CPU default.
CORE_CONFIG = SERVED_CORE_CONFIG
CHUNK = 8
CODE_FILES = (
    "vision_serving/drift.py",
    "vision_serving/preprocessing.py",
    "vision_serving/image_codec.py",
    "vision_serving/served.py",
    "vision_serving/tasks/base.py",
)
PACKAGES = ("numpy", "opencv-python-headless", "onnxruntime", "simplejpeg", "scipy")

# What a reference was built from (provenance inputs["reference"]["source"]).
HELD_OUT = "held-out"
USER_PHOTOS = "photos"
# --limit's random choice of files (fixed: the same folder and limit give the same set).
LIMIT_SEED = 20251130


class StaleUserReference(BuildError):
    """A reference built from the user's photos no longer matches the served model; it is kept."""


@dataclass(frozen=True)
class PhotoSet:
    """The user's photo files a reference is built from, and their hash (names and contents)."""

    directory: Path
    files: tuple[Path, ...]
    found: int  # files in the folder, before --limit
    limit: int | None
    sha256: str

    def record(self) -> dict[str, Any]:
        return {"source": USER_PHOTOS, "files": len(self.files), "sha256": self.sha256, "limit": self.limit}


def photo_set(directory: Path | str, limit: int | None = None) -> PhotoSet:
    """Every non-hidden file under ``directory`` (recursive, sorted; any name: the decoder judges
    the contents), or a seeded random choice of ``limit`` of them, hashed by relative name and sha256."""
    from tqdm import tqdm

    directory = Path(directory)
    if not directory.is_dir():
        raise BuildError(f"--photos {directory}: not a directory")
    if limit is not None and limit < 1:
        raise BuildError(f"--limit must be positive, got {limit}")
    files = sorted(
        path
        for path in directory.rglob("*")
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(directory).parts)
    )
    found = len(files)
    if limit is not None and found > limit:
        chosen = np.random.default_rng(LIMIT_SEED).choice(found, size=limit, replace=False)
        files = [files[index] for index in sorted(chosen)]
    digest = hashlib.sha256()
    for path in tqdm(files, desc="hashing photos", unit="file", file=sys.stderr, disable=len(files) < 200):
        digest.update(f"{path.relative_to(directory).as_posix()}\0{sha256_file(path)}\n".encode())
    return PhotoSet(directory, tuple(files), found, limit, digest.hexdigest())


def _config_digest(model_dir: Path, config_name: str | None) -> str:
    """The config's sha256 without its drift_* parameters (window, selection... do not change the reference)."""
    config = model_config.load_config(model_dir, config_name)
    for key in [key for key in config.parameters if key.startswith("drift_")]:
        del config.parameters[key]
    return hashlib.sha256(model_config.to_json(config).encode()).hexdigest()


def _model_inputs(pipeline: LoadedPipeline, onnx: Path) -> dict[str, Any]:
    """What a reference's values are a function of, besides the images: a change means a new served model."""
    root = layout.REPOSITORY_ROOT
    task_module = f"vision_serving/tasks/{pipeline.task.name}.py"
    return {
        "task": pipeline.task.name,
        "onnx": {"file": onnx.name, "sha256": sha256_file(onnx)},
        "configs": {
            role: _config_digest(pipeline.layout.model_dir(role), CORE_CONFIG if role == "core" else None) for role in layout.ROLES
        },
        "code": {name: sha256_file(root / name) for name in (*CODE_FILES, task_module) if (root / name).is_file()},
        "packages": package_versions(PACKAGES),
    }


def _held_out_inputs(sources: Sequence[Any], count: int) -> dict[str, Any]:
    return {
        "source": HELD_OUT,
        "photos": [{"name": source.name, "sha256": source.sha256} for source in sources],
        "images": count,
        "seed": calibration.EVALUATION_SEED,
        "profile": calibration.EVALUATION_PROFILE.name,
    }


@dataclass
class ServedRun:
    """The references of a run through the served path, and what the decoder refused."""

    references: dict[str, drift.Reference]
    images: int
    refused: list[tuple[str, str]]  # (name, reason)
    # Photos the served preprocess refuses (a tiled photo past max_tiles: INVALID_ARG, so never in the traffic).
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _run_served_path(pipeline: LoadedPipeline, served: ServedPipeline, items: Iterable[tuple[str, bytes]], total: int) -> ServedRun:
    """Decode, preprocess, run the core and postprocess ``items`` (name, encoded bytes) in batches of CHUNK, as served."""
    from tqdm import tqdm

    image_batches: list[drift.Features] = []
    output_batches: list[drift.Features] = []
    refused: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    images = 0

    def run_batch(names: list[str], payloads: list[bytes], decoded: list[image_codec.Decoded]) -> int:
        """The batch's features, as clients' photos are answered: with no request options (a tiled pipeline's photos
        tiled); a photo the served preprocess refuses (a tiled photo past max_tiles) is skipped alone and left out of
        both references, as the server leaves it out. The count of photos kept."""
        try:
            outputs = [served.run_decoded(decoded).features()]
            kept = list(range(len(decoded)))
        except ValueError:
            outputs, kept = [], []
            for index, item in enumerate(decoded):
                try:
                    outputs.append(served.run_decoded([item]).features())
                except ValueError as error:
                    skipped.append((names[index], str(error)))
                    continue
                kept.append(index)
        if kept:
            image_batches.append(served.image_features([payloads[i] for i in kept], [decoded[i] for i in kept]))
            output_batches.extend(outputs)
        return len(kept)

    names: list[str] = []
    payloads: list[bytes] = []
    decoded: list[image_codec.Decoded] = []
    for name, data in tqdm(items, total=total, desc=f"{pipeline.name} drift reference", unit="image", file=sys.stderr):
        try:
            decoded.extend(served.decode_request([data]))  # at the size a photo sent alone is decoded
        except image_codec.ImageError as error:
            refused.append((name, str(error)))
            continue
        names.append(name)
        payloads.append(data)
        if len(payloads) == CHUNK:
            images += run_batch(names, payloads, decoded)
            names, payloads, decoded = [], [], []
    if payloads:
        images += run_batch(names, payloads, decoded)
    references = {
        pipeline.layout.model_name("preprocess"): drift.Reference.from_features(image_batches),
        pipeline.layout.model_name("postprocess"): drift.Reference.from_features(output_batches),
    }
    return ServedRun(references, images, refused, skipped)


def _read_files(photos: PhotoSet, unreadable: list[tuple[str, str]]) -> Iterator[tuple[str, bytes]]:
    for path in photos.files:
        name = path.relative_to(photos.directory).as_posix()
        try:
            yield name, path.read_bytes()
        except OSError as error:
            unreadable.append((name, f"unreadable: {error.strerror or error}"))


def minimum_photos(pipeline: LoadedPipeline) -> int:
    """Usable photos a user reference needs: the larger drift_min_samples of the two drift models."""
    configs = pipeline.configs
    return max(
        drift.DriftSettings.from_config(configs.preprocess, drift.IMAGE_FEATURES).min_samples,
        drift.DriftSettings.from_config(configs.postprocess, pipeline.task.drift_features).min_samples,
    )


def _kept_user_reference(pipeline: LoadedPipeline, output: Path, model_inputs: dict[str, Any], log: Log) -> bool:
    """True when ``output`` is a reference built from the user's photos and still matches the model
    (it is kept); raises StaleUserReference when it no longer does; False when it is not the user's."""
    record = provenance.read_for(output) if output.is_file() else None
    reference = record.inputs.get("reference") if record is not None else None
    if record is None or not isinstance(reference, dict) or reference.get("source") != USER_PHOTOS:
        return False
    directory = record.extra.get("photos_directory", "DIR")
    if input_hash(record.inputs.get("model") or {}) == input_hash(model_inputs) and record.output_sha256 == sha256_file(output):
        log(
            f"{output}: kept (built from {reference.get('files')} of your photos in {directory}); to replace it, rebuild with "
            f"--photos, or delete it to go back to the held-out reference"
        )
        return True
    raise StaleUserReference(
        f"{output} was built from your photos for another model, config or feature code, and is kept as is: rebuild it with "
        f"`python -m builders drift-reference --pipeline {pipeline.name} --photos {directory}`"
    )


# One function: the step as it reads (the photos, up to date or not, the served path, the record), each part a call.
def build(
    pipeline: LoadedPipeline, force: bool = False, log: Log = log_to_stderr, photos: Path | str | None = None, limit: int | None = None
) -> Path:
    """Write (or keep, when up to date) the pipeline's drift reference; returns its path.

    ``photos``: build it from the user's photos in that folder (``limit``: at most that many files).
    Without it, a reference built from the user's photos is kept (StaleUserReference when the model changed)."""
    core_config, version_dir, onnx = _served_core(pipeline)
    if limit is not None and photos is None:
        raise BuildError("--limit needs --photos")
    filename = drift.DriftSettings.from_config(pipeline.configs.preprocess, drift.IMAGE_FEATURES).reference
    output = layout.drift_reference_path(version_dir, filename)
    model_inputs = _model_inputs(pipeline, onnx)

    if photos is None:
        if _kept_user_reference(pipeline, output, model_inputs, log):
            return output
        sources = calibration.evaluation_sources(pipeline)
        count = calibration.held_out_count(pipeline, sources)
        inputs = {"model": model_inputs, "reference": _held_out_inputs(sources, count)}
    else:
        chosen = photo_set(photos, limit)
        needed = minimum_photos(pipeline)
        if len(chosen.files) < needed:
            raise BuildError(
                f"--photos {chosen.directory}: {len(chosen.files)} files; the drift tests need at least {needed} photos (drift_min_samples)"
            )
        inputs = {"model": model_inputs, "reference": chosen.record()}
    expected = input_hash(inputs)
    if not force and provenance.is_current(output, expected):
        log(f"{output} is up to date")
        return output

    served = pipeline.served(CORE_CONFIG, version_dir=version_dir)
    if photos is None:
        run, what, origin, extra = _held_out_run(pipeline, served, sources, count)
    else:
        run, what, origin, extra = _user_photos_run(pipeline, served, chosen, needed, log)
    if run.skipped:
        name, reason = run.skipped[0]
        log(f"left out {len(run.skipped)} image(s) the served pipeline refuses, as it refuses them (first: {name}: {reason})")
    record = {
        "pipeline": pipeline.name,
        "core_version": version_dir.name,
        "onnx": onnx.name,
        "runtime": cpu_runtimes.of_config(core_config).name,
        "images": run.images,
        "photos": what,
        "models": {name: reference.to_json() for name, reference in run.references.items()},
    }
    data = (json.dumps(record, indent=1) + "\n").encode()
    atomic_write_bytes(output, data)
    built = provenance.Provenance.for_bytes(
        STEP,
        expected,
        output,
        data,
        input_hashes={"onnx": model_inputs["onnx"]["sha256"]},
        tools=model_inputs["packages"],
        inputs=inputs,
        extra=extra,
    )
    built.write(provenance.path_for(output))
    for name, reference in run.references.items():
        means = ", ".join(f"{feature} {value:.3g}" for feature, value in reference.means.items())
        log(f"{name}: {means}")
    log(f"wrote {output} ({run.images} {origin} through {onnx.name} on {cpu_runtimes.of_config(core_config).name})")
    return output


def _served_core(pipeline: LoadedPipeline) -> tuple[model_config.ModelConfig, Path, Path]:
    """The CPU core config the reference runs, the served version folder and its ONNX (which must exist)."""
    core_dir = pipeline.layout.core_dir
    core_config = pipeline.configs.core_variant(CORE_CONFIG)
    version_dir = drift.served_version_dir(core_dir)
    if version_dir is None:
        raise BuildError(f"{core_dir}: no version folder; run `python -m builders export --pipeline {pipeline.name}` first")
    onnx = core_model.onnx_path(core_config, version_dir)
    if not onnx.is_file():
        raise BuildError(f"{onnx} does not exist; run `python -m builders export --pipeline {pipeline.name}` first")
    return core_config, version_dir, onnx


def _held_out_run(
    pipeline: LoadedPipeline, served: ServedPipeline, sources: Sequence[Any], count: int
) -> tuple[ServedRun, dict[str, Any], str, dict[str, Any]]:
    """The held-out photos and their seeded augmentations through the served path (one the decoder
    refuses is an error): the run, the record's ``photos``, what the log calls them, the provenance's extra."""
    samples = calibration.make_samples(sources, count, calibration.EVALUATION_SEED, calibration.EVALUATION_PROFILE, served.limits)
    run = _run_served_path(pipeline, served, ((sample.source, sample.data) for sample in samples), len(samples))
    if run.refused:
        name, reason = run.refused[0]
        raise BuildError(f"a held-out image ({name}) was rejected by the served decoder: {reason}")
    return run, {"source": HELD_OUT, "photos": sorted({sample.source for sample in samples})}, "held-out images", {}


def _user_photos_run(
    pipeline: LoadedPipeline, served: ServedPipeline, chosen: PhotoSet, needed: int, log: Log
) -> tuple[ServedRun, dict[str, Any], str, dict[str, Any]]:
    """The user's photos through the served path (files the decoder refuses are skipped, but at least
    ``needed`` must be usable): the run, the record's ``photos``, what the log calls them, the provenance's extra."""
    unreadable: list[tuple[str, str]] = []
    run = _run_served_path(pipeline, served, _read_files(chosen, unreadable), len(chosen.files))
    refused = unreadable + run.refused
    if refused:
        name, reason = refused[0]
        log(f"skipped {len(refused)} of {len(chosen.files)} files the served decoder refuses (first: {name}: {reason})")
    if run.images < needed:
        raise BuildError(
            f"--photos {chosen.directory}: {run.images} usable photos ({len(refused)} refused); "
            f"the drift tests need at least {needed} (drift_min_samples)"
        )
    what = {"source": USER_PHOTOS, "directory": str(chosen.directory), "files": len(chosen.files), "refused": len(refused)}
    return run, what, f"of your photos ({chosen.directory})", {"photos_directory": str(chosen.directory)}


def add_arguments(parser: Any) -> None:
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date (never replaces a reference built from --photos)")
    parser.add_argument(
        "--photos",
        type=Path,
        metavar="DIR",
        help="build it from your own representative photos (a folder, recursive, e.g. a sample of your traffic) instead of "
        "the held-out test photos; kept until you rebuild it or the model changes",
    )
    parser.add_argument("--limit", type=int, metavar="N", help="with --photos: use N of the folder's files (a seeded random choice)")


def run_from_args(args: Any) -> int:
    build(args.loaded, force=args.force, photos=args.photos, limit=args.limit)
    return 0
