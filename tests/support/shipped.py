"""The pipelines the project ships (committed in model_repository/). The tests about them take them from here, so a
pipeline a user adds beside them (docs/models.md) never changes what those tests expect; a user's pipeline is checked by
``python -m vision_serving.consistency``, as the user runs it."""

from __future__ import annotations

from pathlib import Path

from vision_serving import layout

NAMES = ("face_detector", "image_classifier", "person_segmenter", "text_reader")


def pipelines() -> list[layout.Pipeline]:
    """The shipped pipelines of the project's model repository, by name."""
    return [layout.pipeline(name, layout.MODEL_REPOSITORY) for name in NAMES]


def repository(folder: Path) -> Path:
    """A model repository in ``folder`` of the shipped pipelines alone (links to the project's folders): what a command
    that lists a repository's pipelines is tested on, whatever a user added beside them."""
    found = folder / "model_repository"
    found.mkdir(parents=True)
    for name in NAMES:
        (found / name).symlink_to(layout.MODEL_REPOSITORY / name, target_is_directory=True)
    return found
