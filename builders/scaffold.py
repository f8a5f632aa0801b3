"""``python -m builders new-pipeline NAME --from TEMPLATE|FAMILY``: start a pipeline folder.

- ``--from TEMPLATE`` (a pipeline of the repository): its spec (``pipeline.toml``, without its comments: they
  describe its model and its measurements) and every file of its folder that is neither generated from the spec nor
  built (a model file the spec names, hand-written labels), the model folders renamed; then every config generated
  for the new name. The spec is then yours to edit.
- ``--from FAMILY --model FILE`` (:data:`FAMILIES`: ``yolo``): writes the spec for that model, read from the file
  itself (:mod:`builders.families.yolo`), the model and its labels; then every generated file.

Both write through one generation (:mod:`builders.configs.generate`), as ``python -m builders configs`` does.
Nothing outside the new folder changes: the server, the builders, the consistency check and the tests find
pipelines by their folder.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

from builders import BuildError, Log, spec, stderr_logger
from builders.configs import generate
from builders.families import yolo, yolo_classify, yolo_depth, yolo_exports, yolo_semantic
from vision_serving import layout

log_to_stderr = stderr_logger("new-pipeline")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


# Families: what --from names besides a pipeline; each writes the folder from the model file.
def _ultralytics(
    name: str, target: Path, model: Path, labels: Path | None, head: str | None, imgsz: str | None, tiled: bool, log: Log
) -> None:
    """An Ultralytics export, by the task its metadata names: a classify model becomes a classification pipeline, a
    depth model a depth pipeline, a semantic model a semantic segmentation pipeline, the tasks of the detection heads a detection pipeline (tiled where ``tiled``:
    docs/tiling.md); any other task is refused, naming the tasks served."""
    size = yolo.parse_imgsz(imgsz)
    task = yolo_classify.metadata(model).get("task", "detect") if model.is_file() else "detect"
    if task in ULTRALYTICS_TASKS:
        if tiled:
            raise BuildError(f"--tiling: {model.name} is an Ultralytics {task} model; tiling is for the detection heads")
        ULTRALYTICS_TASKS[task](name, target, model, labels, head, size, log)
    elif task in yolo_exports.tasks():
        yolo.scaffold(name, target, model, labels, head, size, log, tiled)
    else:
        served = ", ".join(sorted([*ULTRALYTICS_TASKS, *yolo_exports.tasks()]))
        raise yolo.UnsupportedModel(f"{model.name} is an Ultralytics '{task}' model; supported: {served}")


# The Ultralytics tasks served by a family of their own (the detection heads' tasks: builders.families.yolo).
ULTRALYTICS_TASKS: dict[str, Callable[[str, Path, Path, Path | None, str | None, tuple[int, int] | None, Log], None]] = {
    yolo_classify.TASK: yolo_classify.scaffold,
    yolo_depth.TASK: yolo_depth.scaffold,
    yolo_semantic.TASK: yolo_semantic.scaffold,
}


FAMILIES: dict[str, Callable[[str, Path, Path, Path | None, str | None, str | None, bool, Log], None]] = {"yolo": _ultralytics}


def new_pipeline(
    name: str,
    template: str,
    repository: Path = layout.MODEL_REPOSITORY,
    log: Log = log_to_stderr,
    model: Path | None = None,
    labels: Path | None = None,
    head: str | None = None,
    imgsz: str | None = None,
    tiled: bool = False,
) -> layout.Pipeline:
    if not NAME_PATTERN.match(name):
        raise BuildError(f"pipeline name {name!r}: use lower-case letters, digits and _ (it prefixes every model name)")
    target = layout.Pipeline(name, repository / name)
    if target.repository.exists():
        raise BuildError(f"{target.repository} already exists")
    if template in FAMILIES:
        if model is None:
            raise BuildError(f"--from {template} needs --model FILE (the model to serve)")
        FAMILIES[template](name, target.repository, model, labels, head, imgsz, tiled, log)
        log(f"created {target.repository} for {model.name}; next: {next_commands(name, repository)}")
        return target
    if model is not None or labels is not None or head is not None or imgsz is not None or tiled:
        raise BuildError(
            f"--model, --labels, --head, --imgsz and --tiling go with --from {' or '.join(FAMILIES)}, not with a pipeline template "
            "(a template's spec takes a [tiling] table: docs/tiling.md)"
        )
    copy_template(name, template, repository, target)
    log(
        f"created {target.repository} from {template}: edit its pipeline.toml for your model "
        f"(docs/models.md, 'Any ONNX model: start from the pipeline of its task'); then {next_commands(name, repository)}"
    )
    return target


def next_commands(name: str, repository: Path) -> str:
    """The build and serve commands for the new pipeline, with ``--model-repository`` when it is not the default."""
    default = Path(repository).resolve() == layout.MODEL_REPOSITORY.resolve()
    option = "" if default else f" --model-repository {shlex.quote(str(repository))}"
    return f"`python -m builders all --pipeline {name}{option}`, then `./scripts/serve{option}`"


def copy_template(name: str, template: str, repository: Path, target: layout.Pipeline) -> None:
    """The template's spec (its comments dropped: they describe its model and its measurements) and every file of its
    folder a build needs that is not generated from the spec (a model file the spec names, labels), into ``target``;
    then every generated file, for the new name."""
    try:
        source = layout.pipeline(template, repository)
    except layout.LayoutError:
        known = ", ".join(p.name for p in layout.pipelines(repository))
        raise BuildError(f"--from {template!r} is neither a pipeline ({known}) nor a model family ({', '.join(FAMILIES)})") from None
    generated = set(generate.files(spec.load(source)))
    for path in sorted(source.repository.rglob("*")):
        relative = path.relative_to(source.repository)
        built = len(relative.parts) > 2 and relative.parts[1].isdigit()  # a model version's artifacts
        if not path.is_file() or path in generated or built or "__pycache__" in relative.parts or path.name == layout.RECIPE_FILENAME:
            continue
        model = relative.parts[0]
        renamed = Path(name + model[len(source.name) :], *relative.parts[1:]) if model.startswith(source.name) else relative
        (target.repository / renamed).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target.repository / renamed)
    header = (
        f"# Copied from the {source.name} pipeline by `python -m builders new-pipeline {name} --from {source.name}`: edit it\n"
        f"# for your model, then run `python -m builders configs --pipeline {name}`."
    )
    target.repository.mkdir(parents=True, exist_ok=True)
    target.recipe.write_text(header + "\n" + strip_comments(source.recipe.read_text()))
    write_generated(target)


def write_generated(pipeline: layout.Pipeline) -> None:
    """Every file generated from the pipeline's spec (``python -m builders configs``)."""
    for path, text in generate.files(spec.load(pipeline)).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``python -m builders new-pipeline``'s options (--pipeline names a pipeline to build: the new one is NAME)."""
    from builders import arguments

    parser.add_argument("name", help="the new pipeline (and ensemble) name: lower-case letters, digits, _")
    arguments.add_model_repository(parser, "the model repository to add it to")
    parser.add_argument("--from", dest="template", required=True, metavar="TEMPLATE", help="a pipeline to copy, or a model family: yolo")
    parser.add_argument("--model", type=Path, metavar="FILE", help="--from yolo: the ONNX export to serve (copied into the folder)")
    parser.add_argument("--labels", type=Path, metavar="FILE", help="--from yolo: class names, one per line (default: the export's names)")
    parser.add_argument("--head", metavar="HEAD", help="--from yolo: the head, when the output's shape fits two (yolo, yolo_v5, end2end)")
    parser.add_argument("--imgsz", metavar="H,W", help="--from yolo: the input size when the export's is dynamic and has no imgsz metadata")
    parser.add_argument(
        "--tiling", action="store_true", help="--from yolo: tiled inference (small objects in large photos): a [tiling] table in the spec"
    )


def run_from_args(args: argparse.Namespace) -> int:
    new_pipeline(
        args.name,
        args.template,
        args.model_repository,
        model=args.model,
        labels=args.labels,
        head=args.head,
        imgsz=args.imgsz,
        tiled=args.tiling,
    )
    return 0
