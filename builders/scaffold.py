"""``python -m builders new-pipeline NAME --from TEMPLATE``: start a pipeline from an existing one.

Copies ``model_repository/TEMPLATE/`` to ``model_repository/NAME/`` without its
built artifacts (ONNX files, plans, provenance records, labels written by a
build), renames the ensemble and its composing models (folders, ``name:``
and ``model_name:`` in every config) and the recipe stays the template's, for
you to edit. Nothing outside the new folder changes: the server, the builders,
the consistency check and the tests find pipelines by their folder.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from builders import BuildError, Log, stderr_logger
from vision_serving import layout

log_to_stderr = stderr_logger("new-pipeline")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
BUILT = ("*.onnx", "*.plan", "*.json", "*.timing.cache", "__pycache__")


def new_pipeline(name: str, template: str, repository: Path = layout.MODEL_REPOSITORY, log: Log = log_to_stderr) -> layout.Pipeline:
    if not NAME_PATTERN.match(name):
        raise BuildError(f"pipeline name {name!r}: use lower-case letters, digits and _ (it prefixes every model name)")
    source = layout.pipeline(template, repository)
    target = layout.Pipeline(name, repository / name)
    if target.repository.exists():
        raise BuildError(f"{target.repository} already exists")
    labels = [source.model_dir("postprocess") / "labels.txt"]
    shutil.copytree(source.repository, target.repository, ignore=shutil.ignore_patterns(*BUILT))
    for label_file in labels:
        copied = target.repository / label_file.relative_to(source.repository)
        copied.unlink(missing_ok=True)  # written by the template's own export
    for model in [source.name, *(source.model_name(role) for role in layout.ROLES)]:
        renamed = name + model[len(source.name) :]
        (target.repository / model).rename(target.repository / renamed)
    for config in sorted(target.repository.rglob("*.pbtxt")):
        text = re.sub(
            rf'^(name: |\s*model_name: )"{re.escape(source.name)}(_[a-z]+)?"',
            lambda m: f'{m.group(1)}"{name}{m.group(2) or ""}"',
            config.read_text(),
            flags=re.M,
        )
        config.write_text(text)
    log(f"created {target.repository} from {source.name}: edit pipeline.toml and the configs (see README, 'Add your own model')")
    return target
