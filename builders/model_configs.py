"""``python -m builders configs``: write every generated file of a pipeline folder from its spec (``pipeline.toml``).

Per pipeline (``--pipeline NAME``, or ``--all``): every model's ``config.pbtxt``, each core's (and second stage's)
``configs/<variant>.pbtxt`` and the Python models' ``1/model.py`` (:mod:`builders.configs.generate`). Every text is
made before any file is written; a file whose text is unchanged is not touched. ``--check`` writes nothing and exits
1 when a file differs from its generation, naming the file and, for a config, the fields.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from builders import BuildError, Log, spec, stderr_logger
from builders.configs import generate, header_line, render
from vision_serving import layout, model_config

log_to_stderr = stderr_logger("configs")


def generated(pipeline: layout.Pipeline) -> dict[Path, str]:
    """Every generated file of ``pipeline`` with its text (``BuildError``: one line when the spec cannot be used)."""
    try:
        return generate.files(spec.load(pipeline))
    except model_config.ConfigError as error:
        raise BuildError(f"{pipeline.recipe}: {error}") from None


def stale(pipeline: layout.Pipeline) -> dict[Path, str]:
    """The files of ``pipeline`` whose text differs from their generation (missing ones included), with that text."""
    return {path: text for path, text in generated(pipeline).items() if not path.is_file() or path.read_text() != text}


def leftovers(pipeline: layout.Pipeline) -> list[Path]:
    """Config variants an earlier generation wrote that this one does not (a preprocess's CPU variants after its
    spec left the GPU pixel path): ``configs/*.pbtxt`` of the folder's models that start with the generated header."""
    made = generated(pipeline)
    first = header_line(pipeline.name)
    found = sorted(pipeline.repository.glob("*/configs/*.pbtxt"))
    return [path for path in found if path not in made and path.read_text().split("\n", 1)[0] == first]


def difference(path: Path, text: str) -> str:
    """Why ``path`` differs from its generation ``text``: missing, the config fields that differ, or its text."""
    if not path.is_file():
        return f"{path}: missing"
    if path.suffix == ".pbtxt":
        try:
            found = render.differences(model_config.parse_config_text(path.read_text(), str(path)), model_config.parse_config_text(text))
        except model_config.ConfigError as error:
            return f"{path}: does not parse ({error})"
        if found:
            more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
            return f"{path}: {'; '.join(found[:3])}{more}"
    return f"{path}: its text differs from its generation (comments, layout)"


def write(pipeline: layout.Pipeline, log: Log = log_to_stderr) -> list[Path]:
    """Write the generated files of ``pipeline`` and remove its :func:`leftovers`; returns the files written."""
    changed = stale(pipeline)
    removed = leftovers(pipeline)
    for path, text in changed.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for path in removed:
        path.unlink()
    names = ", ".join(str(path.relative_to(pipeline.repository)) for path in changed)
    gone = ", ".join(str(path.relative_to(pipeline.repository)) for path in removed)
    said = [f"wrote {names}"] * bool(changed) + [f"removed {gone}"] * bool(removed)
    log(f"{pipeline.name}: {'; '.join(said)}" if said else f"{pipeline.name}: up to date")
    return list(changed)


def chosen(args: argparse.Namespace) -> list[layout.Pipeline]:
    """``--all``, ``--pipeline NAME``, or the repository's only pipeline."""
    if args.all and args.pipeline:
        raise BuildError("--all and --pipeline: choose one")
    if args.all:
        return layout.pipelines(args.model_repository)
    if args.pipeline:
        return [layout.pipeline(args.pipeline, args.model_repository)]
    found = layout.pipelines(args.model_repository)
    if len(found) != 1:
        raise BuildError(f"choose a pipeline with --pipeline NAME, or --all (pipelines: {', '.join(p.name for p in found) or 'none'})")
    return found


def run_from_args(args: argparse.Namespace) -> int:
    pipelines = chosen(args)
    if not args.check:
        for pipeline in pipelines:
            write(pipeline)
        return 0
    differing = [difference(path, text) for pipeline in pipelines for path, text in stale(pipeline).items()]
    differing += [f"{path}: no longer generated (remove it)" for pipeline in pipelines for path in leftovers(pipeline)]
    for line in differing:
        print(f"differs from its generation: {line}")
    if differing:
        print(f"{len(differing)} file(s) to regenerate: edit pipeline.toml, not a generated file, then run python -m builders configs")
    return 1 if differing else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``python -m builders configs``'s options."""
    parser.add_argument("--all", action="store_true", help="every pipeline of the model repository")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs from its generation")
