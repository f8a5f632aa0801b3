"""The client of a task without a module of its own in ``devtools/clients``: every output of each image, by role.

The table gives each output's shape and values (long ones elided in the middle); ``--json`` gives every output
in full as nested lists. A BYTES element reads as its UTF-8 text, or, when it is not text (an encoded mask, say),
as ``<N bytes>`` in the table and ``{"bytes": N, "base64": ...}`` in JSON.
"""

from __future__ import annotations

import argparse
import base64
from collections.abc import Mapping
from typing import Any

import numpy as np

from .base import ClientReport, TaskClient

SHOWN = 12  # values of an output the table shows before it elides the middle


def _element(value: Any) -> Any:
    """One element of an output as JSON: a number, or a BYTES element's text (or its bytes, when it is not text)."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"bytes": len(value), "base64": base64.b64encode(value).decode("ascii")}
    return value.item() if isinstance(value, np.generic) else value


def as_json(value: np.ndarray) -> Any:
    """An output as nested lists (its shape kept), BYTES elements as :func:`_element` gives them."""
    array = np.asarray(value)
    if array.dtype.kind in "OSU":
        if array.ndim == 0:
            return _element(array.item())
        return [as_json(item) for item in array]
    return array.tolist()


def as_text(value: np.ndarray) -> str:
    """An output in one line: numbers unpadded (6 significant digits), BYTES elements as their text or ``<N bytes>``."""
    array = np.asarray(value)
    if array.dtype.kind in "OSU" and array.size:
        array = np.vectorize(lambda item: _shown(_element(item)), otypes=[object])(array)
    return np.array2string(
        array,
        threshold=SHOWN,
        edgeitems=SHOWN // 4,
        max_line_width=1 << 20,
        separator=", ",
        formatter={"float_kind": lambda x: f"{x:.6g}", "int_kind": str, "bool": str},
    )


def _shown(element: Any) -> str:
    return f"<{element['bytes']} bytes>" if isinstance(element, dict) else str(element)


class GenericClient(TaskClient):
    """No options, no request inputs, no files: each output of the answer, in the order of the task's roles."""

    def report(self, name: str, outputs: Mapping[str, np.ndarray], image: bytes, args: argparse.Namespace) -> ClientReport:
        width = max([len("output"), *(len(role) for role in outputs)])
        lines = [name]
        for role, value in outputs.items():
            shape = "x".join(str(size) for size in np.shape(value)) or "scalar"
            lines.append(f"  {role:<{width}}  [{shape}]  {as_text(value)}")
        return ClientReport(lines, {"file": name, "outputs": {role: as_json(value) for role, value in outputs.items()}})


CLIENT = GenericClient()
