"""Stage the model image's content: one model version of every pipeline (docker/models.Dockerfile).

    python -m devtools.model_image --output DIR [--model-repository model_repository]
    docker build -f docker/models.Dockerfile -t "$MODELS_IMAGE" DIR

Copies every pipeline folder of the built model repository (folders with a
pipeline.toml) into ``DIR/model_repository/``: model configs and their
``configs/`` variants, the Python models, the core's ONNX files and the
``served_precision.json`` naming the one the plan is built from, labels, drift
references and every provenance record. Left out: what each pod builds for its
own GPU (TensorRT plans, their records, timing caches) and Python caches. DIR
is the whole Docker build context (the Dockerfile copies ``model_repository/``),
so nothing else of the checkout can reach the image.

A repository that is not built is refused, in one line, exit 2: no pipeline, a
model folder without config.pbtxt, or a core whose precision ladder has not run
(no served_precision.json) or whose served ONNX is missing or changed since.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from vision_serving import layout

STAGED_REPOSITORY = "model_repository"  # the folder docker/models.Dockerfile copies to /model_repository
# Built per node, never shipped: plans and their provenance, timing caches, Python caches, temporary files.
EXCLUDED_SUFFIXES = (f".plan{layout.PROVENANCE_SUFFIX}", ".plan", ".timing.cache", ".tmp", ".pyc")
EXCLUDED_DIRECTORIES = ("__pycache__",)


class ModelImageError(ValueError):
    """The repository cannot become a model image; the message says why in one line."""


def excluded(path: Path) -> bool:
    return path.name.endswith(EXCLUDED_SUFFIXES) or any(part in EXCLUDED_DIRECTORIES for part in path.parts)


def check_built(pipeline: layout.Pipeline) -> None:
    for model_dir in (pipeline.ensemble_dir, *(pipeline.model_dir(role) for role in layout.ROLES)):
        if not (model_dir / "config.pbtxt").is_file():
            raise ModelImageError(f"{model_dir}: no config.pbtxt")
    if not pipeline.served_precision.is_file():
        raise ModelImageError(f"{pipeline.served_precision}: missing (run `python -m builders all --pipeline {pipeline.name}` first)")
    if pipeline.served_onnx() is None:
        raise ModelImageError(
            f"{pipeline.served_precision}: its ONNX is missing or changed since the ladder measured it (run `python -m builders all`)"
        )


def files_to_stage(repository: Path) -> list[Path]:
    """Every file of every pipeline folder that goes into the image, relative to ``repository``."""
    pipelines = layout.pipelines(repository)
    if not pipelines:
        raise ModelImageError(f"no pipeline in {repository} (no <pipeline>/{layout.RECIPE_FILENAME})")
    files = []
    for pipeline in pipelines:
        check_built(pipeline)
        for path in sorted(pipeline.repository.rglob("*")):
            relative = path.relative_to(repository)
            if path.is_file() and not excluded(relative):
                files.append(relative)
    return files


def stage(repository: Path, output: Path, progress: bool = False) -> list[Path]:
    """Replace ``output/model_repository`` with the image's content; returns the staged files (relative)."""
    repository, output = repository.resolve(), output.resolve()
    if output == repository or output.is_relative_to(repository):
        raise ModelImageError(f"--output {output} is inside the model repository {repository}")
    files = files_to_stage(repository)
    target = output / STAGED_REPOSITORY
    if target.exists():
        shutil.rmtree(target)
    if progress:
        from tqdm import tqdm

        iterator = tqdm(files, desc="model image", unit="file", file=sys.stderr)
    else:
        iterator = files
    for relative in iterator:
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repository / relative, target / relative)
    return files


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devtools.model_image", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, required=True, help="the Docker build context to write (DIR/model_repository/ is replaced)")
    parser.add_argument("--model-repository", type=Path, default=layout.MODEL_REPOSITORY, help="the built model repository")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        files = stage(args.model_repository, args.output, progress=True)
    except (ModelImageError, layout.LayoutError) as error:
        print(f"model_image: error: {error}", file=sys.stderr)
        return 2
    size = sum((args.output / STAGED_REPOSITORY / f).stat().st_size for f in files)
    print(f"model_image: {len(files)} files, {size / 1e6:.1f} MB in {args.output / STAGED_REPOSITORY}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
