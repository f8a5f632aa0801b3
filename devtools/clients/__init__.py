"""The command-line clients of the tasks, one module per task, named as the task is (``vision_serving.tasks.registry``).

``devtools/clients/<task name>.py`` exports ``CLIENT``, a :class:`~devtools.clients.base.TaskClient`: its options,
the request inputs they set, the files it writes, the report of one answer (drawing with OpenCV:
:mod:`~devtools.clients.drawing`). A task without a module here gets :mod:`~devtools.clients.generic`'s client,
which prints every output, so a new task has a working client before it has one of its own. Nothing lists the tasks.
"""

from __future__ import annotations

from vision_serving.tasks import registry

from .base import ClientReport, TaskClient
from .generic import CLIENT as GENERIC

__all__ = ["GENERIC", "ClientReport", "TaskClient", "client_for"]


def client_for(task_name: str) -> TaskClient:
    """The client of the task ``task_name``: ``devtools.clients.<task_name>.CLIENT``, or the generic client when
    there is no such module. A module of that name without a ``TaskClient`` as ``CLIENT`` is a ``TypeError``."""
    return registry.per_task(__name__, task_name, "CLIENT", TaskClient, GENERIC, "the client")
