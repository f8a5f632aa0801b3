"""What a task's command-line client is (:class:`TaskClient`), and what it hands back for one image (:class:`ClientReport`).

:mod:`devtools.client` does what every task shares (files, batches, the server, retries, exit codes); a
client adds the task's own part: its options, the optional request inputs they set, the files it writes,
and how one answer reads as text and JSON. It reads the task's data (roles, labels, suffixes of
:mod:`vision_serving.tasks`); the serving library holds no client code.
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ClientReport:
    """One image's answer as the client shows it: its lines of the table, its JSON record, and the files it wrote
    (named in the lines and the record too)."""

    lines: list[str]
    record: dict[str, Any]
    files: list[str] = field(default_factory=list)


class TaskClient(ABC):
    """The command-line client of one task: ``devtools/clients/<task name>.py`` exports one as ``CLIENT``."""

    # The program that runs it, ./scripts/<script> (None: only `python -m devtools.client --task NAME`).
    script: str | None = None
    # What ./scripts/serve suggests sending it: a file of .build/samples ("": the whole folder).
    sample: str = ""
    # The shipped pipeline it calls without --model when model_repository/ has it (else the task's only pipeline there).
    pipeline: str | None = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:  # noqa: B027 (optional: none by default)
        """The task's own options, added to the ones every client takes."""

    def request_inputs(self, args: argparse.Namespace, count: int) -> dict[str, np.ndarray]:
        """The optional request inputs by role (the task's ``request_roles``) the options set, for ``count`` images."""
        return {}

    def output_suffixes(self) -> tuple[str, ...]:
        """Endings of the files it writes (never sent back as inputs when a folder is sent again)."""
        return ()

    @abstractmethod
    def report(self, name: str, outputs: Mapping[str, np.ndarray], image: bytes, args: argparse.Namespace) -> ClientReport:
        """One image's answer (its outputs by role, without the batch dim; ``image``: the bytes sent) as text lines
        and JSON, writing any files the options ask for; ``ValueError`` or ``OSError`` fail that file only.

        ``args`` holds the parsed options and what the program (:mod:`devtools.client`, which loads the clients: a
        client never imports it) adds: ``single_image`` (one file was sent) and ``task_parameters`` (the pipeline's
        postprocess config's parameters as text, read from the server with its interface); either may be missing in
        a report made without a run."""


def text(value: Any) -> str:
    """A BYTES element (UTF-8) or anything else as text."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def positive_int(value: str) -> int:
    """An argparse type: an integer of at least 1."""
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number
