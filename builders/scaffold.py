"""``python -m builders new-pipeline NAME --from TEMPLATE|FAMILY``: start a pipeline folder.

- ``--from TEMPLATE`` (a pipeline of the repository): copies ``model_repository/TEMPLATE/``
  to ``model_repository/NAME/`` without its built artifacts (ONNX files, plans, provenance
  records, labels written by a build), renames the ensemble and its composing models
  (folders, ``name:`` and ``model_name:`` in every config), and drops the template's comments
  (they describe its model and its measurements): each file starts with one line saying where
  it came from. The recipe and the configs are then yours to edit.
- ``--from FAMILY --model FILE`` (:data:`FAMILIES`: ``yolo``): writes a complete pipeline for
  that model, read from the file itself (:mod:`builders.families.yolo`).

Nothing outside the new folder changes: the server, the builders, the consistency check and
the tests find pipelines by their folder.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

from builders import BuildError, Log, stderr_logger
from builders.families import yolo, yolo_classify
from vision_serving import layout

log_to_stderr = stderr_logger("new-pipeline")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
BUILT = ("*.onnx", "*.plan", "*.json", "*.timing.cache", "*.tmp", "__pycache__")


# Families: what --from names besides a pipeline; each writes the folder from the model file.
def _ultralytics(name: str, target: Path, model: Path, labels: Path | None, head: str | None, imgsz: str | None, log: Log) -> None:
    """An Ultralytics export: a classify model becomes a classification pipeline, the tasks of the detection heads a
    detection pipeline."""
    size = yolo.parse_imgsz(imgsz)
    if yolo_classify.is_classify(model):
        yolo_classify.scaffold(name, target, model, labels, head, size, log)
    else:
        yolo.scaffold(name, target, model, labels, head, size, log)


FAMILIES: dict[str, Callable[[str, Path, Path, Path | None, str | None, str | None, Log], None]] = {"yolo": _ultralytics}


def new_pipeline(
    name: str,
    template: str,
    repository: Path = layout.MODEL_REPOSITORY,
    log: Log = log_to_stderr,
    model: Path | None = None,
    labels: Path | None = None,
    head: str | None = None,
    imgsz: str | None = None,
) -> layout.Pipeline:
    if not NAME_PATTERN.match(name):
        raise BuildError(f"pipeline name {name!r}: use lower-case letters, digits and _ (it prefixes every model name)")
    target = layout.Pipeline(name, repository / name)
    if target.repository.exists():
        raise BuildError(f"{target.repository} already exists")
    if template in FAMILIES:
        if model is None:
            raise BuildError(f"--from {template} needs --model FILE (the model to serve)")
        FAMILIES[template](name, target.repository, model, labels, head, imgsz, log)
        log(f"created {target.repository} for {model.name}; next: {next_commands(name, repository)}")
        return target
    if model is not None or labels is not None or head is not None or imgsz is not None:
        raise BuildError(f"--model, --labels, --head and --imgsz go with --from {' or '.join(FAMILIES)}, not with a pipeline template")
    copy_template(name, template, repository, target)
    log(
        f"created {target.repository} from {template}: edit pipeline.toml and the configs "
        f"(docs/models.md, 'Any ONNX model: start from the pipeline of its task'); then {next_commands(name, repository)}"
    )
    return target


def next_commands(name: str, repository: Path) -> str:
    """The build and serve commands for the new pipeline, with ``--model-repository`` when it is not the default."""
    default = Path(repository).resolve() == layout.MODEL_REPOSITORY.resolve()
    option = "" if default else f" --model-repository {shlex.quote(str(repository))}"
    return f"`python -m builders all --pipeline {name}{option}`, then `./scripts/serve{option}`"


def copy_template(name: str, template: str, repository: Path, target: layout.Pipeline) -> None:
    try:
        source = layout.pipeline(template, repository)
    except layout.LayoutError:
        known = ", ".join(p.name for p in layout.pipelines(repository))
        raise BuildError(f"--from {template!r} is neither a pipeline ({known}) nor a model family ({', '.join(FAMILIES)})") from None
    shutil.copytree(source.repository, target.repository, ignore=shutil.ignore_patterns(*BUILT))
    (target.repository / source.model_name("postprocess") / "labels.txt").unlink(missing_ok=True)  # the template's classes
    for model in [source.name, *(source.model_name(role) for role in layout.ROLES)]:
        renamed = name + model[len(source.name) :]
        (target.repository / model).rename(target.repository / renamed)
    header = f"# Copied from the {source.name} pipeline by `python -m builders new-pipeline {name} --from {source.name}`: edit it for your model."
    for path in sorted([*target.repository.rglob("*.pbtxt"), target.repository / layout.RECIPE_FILENAME]):
        text = re.sub(
            rf'^(name: |\s*model_name: )"{re.escape(source.name)}(_[a-z]+)?"',
            lambda m: f'{m.group(1)}"{name}{m.group(2) or ""}"',
            path.read_text(),
            flags=re.M,
        )
        path.write_text(header + "\n" + strip_comments(text))


def strip_comments(text: str) -> str:
    """Config or recipe text without its comment lines and trailing comments (``#`` outside quotes)."""
    kept = []
    for line in text.splitlines():
        code = _code(line)
        if code.strip() or not line.strip():
            kept.append(code.rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip("\n") + "\n"


def _code(line: str) -> str:
    quoted = False
    for index, char in enumerate(line):
        if char == '"' and (index == 0 or line[index - 1] != "\\"):
            quoted = not quoted
        elif char == "#" and not quoted:
            return line[:index]
    return line
