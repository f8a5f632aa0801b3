"""The command-line clients of the tasks, one module per task, named as the task is (``vision_serving.tasks.registry``).

``devtools/clients/<task name>.py`` exports ``CLIENT``, a :class:`~devtools.clients.base.TaskClient`: its options,
the request inputs they set, the files it writes, the report of one answer (drawing with OpenCV:
:mod:`~devtools.clients.drawing`). A task without a module here gets :mod:`~devtools.clients.generic`'s client,
which prints every output, so a new task has a working client before it has one of its own. Nothing lists the tasks.
"""

from __future__ import annotations

import importlib

from .base import ClientReport, TaskClient
from .generic import CLIENT as GENERIC

__all__ = ["GENERIC", "ClientReport", "TaskClient", "client_for"]


def client_for(task_name: str) -> TaskClient:
    """The client of the task ``task_name``: ``devtools.clients.<task_name>.CLIENT``, or the generic client when
    there is no such module. A module of that name without a ``TaskClient`` as ``CLIENT`` is a ``TypeError``."""
    if not task_name.isidentifier():
        return GENERIC
    module_name = f"{__name__}.{task_name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise  # the client module exists and imports something missing: not a task without a client
        return GENERIC
    client = getattr(module, "CLIENT", None)
    if not isinstance(client, TaskClient):
        raise TypeError(f"{module_name} is not the client of task {task_name!r}: it has no CLIENT (a devtools.clients.base.TaskClient)")
    return client
