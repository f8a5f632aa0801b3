"""Every task, by the name a postprocess config's ``task`` parameter gives it: the one place that lists them."""

from __future__ import annotations

from ..model_config import ConfigError, ModelConfig, parameter
from . import classification, detection, segmentation
from .base import Task
from .text_reading import task as text_reading

TASKS: dict[str, Task] = {task.name: task for task in (classification.TASK, segmentation.TASK, detection.TASK, text_reading.TASK)}


def task(name: str) -> Task:
    if name not in TASKS:
        raise ConfigError(f"task {name!r} is not one of {', '.join(sorted(TASKS))}")
    return TASKS[name]


def for_config(config: ModelConfig) -> Task:
    """The task of a postprocess model: its ``task`` parameter."""
    try:
        return task(parameter(config, "task"))
    except ConfigError as error:
        raise ConfigError(f"model '{config.name}': {error}") from None
