"""Every task, by the name a postprocess config's ``task`` parameter gives it: the one place that lists them."""

from __future__ import annotations

import importlib
from typing import Any, TypeVar, cast

from ..model_config import ConfigError, ModelConfig, parameter
from . import classification, depth, detection, segmentation, semantic_segmentation
from .base import Task
from .text_reading import task as text_reading

TASKS: dict[str, Task] = {
    task.name: task
    for task in (classification.TASK, segmentation.TASK, detection.TASK, text_reading.TASK, depth.TASK, semantic_segmentation.TASK)
}


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


T = TypeVar("T")


def per_task(package: str, task_name: str, attribute: str, kind: type[Any], fallback: T, what: str = "the module") -> T:
    """What a package holds for one task, found by the task's name: ``<package>.<task_name>.<attribute>``, an instance of
    ``kind`` (a client's or an answer's module of that task), or ``fallback`` where the package has no module of that name.
    A module of that name without such an attribute is a ``TypeError``; one that fails to import fails."""
    if not task_name.isidentifier():
        return fallback
    module_name = f"{package}.{task_name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise  # the module exists and imports something missing: not a task without a module
        return fallback
    found = getattr(module, attribute, None)
    if not isinstance(found, kind):
        raise TypeError(
            f"{module_name} is not {what} of task {task_name!r}: it has no {attribute} (a {kind.__module__}.{kind.__qualname__})"
        )
    return cast(T, found)
