"""How each task's answers read as JSON: one module per task, named as the task is (``vision_serving.tasks.registry``).

``gateway/answers/<task name>.py`` exports ``ANSWER``, a :class:`~gateway.answers.base.TaskAnswer`: the JSON it makes
of one photo's outputs (by the task's roles), that JSON's schema, the ranges of the pipeline's request options and the
answer's own choices (a mask as PNG or RLE). A task without a module here gets :mod:`~gateway.answers.generic`'s answer,
every output by role, so a new task is served before it has one of its own. Nothing lists the tasks.
"""

from __future__ import annotations

from vision_serving.tasks import registry

from .base import TaskAnswer
from .generic import ANSWER as GENERIC

__all__ = ["GENERIC", "TaskAnswer", "answer_for"]


def answer_for(task_name: str) -> TaskAnswer:
    """``gateway.answers.<task_name>.ANSWER``, or the generic answer where there is no such module. A module of that
    name without a ``TaskAnswer`` as ``ANSWER`` is a ``TypeError``."""
    return registry.per_task(__name__, task_name, "ANSWER", TaskAnswer, GENERIC, "the answer")
