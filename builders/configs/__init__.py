"""Every Triton config of a pipeline folder, generated from its spec (:mod:`builders.spec`): ``python -m builders configs``.

- :mod:`.generate`: the ensemble, the preprocess, the core, the postprocess and the second stages as ``ModelConfig``
  messages, and every other generated file of the folder (the Python models' entry points);
- :mod:`.variants`: each core's CPU variants (``configs/<variant>.pbtxt``);
- :mod:`.render`: the text of a config, and where two differ.

Every generated file starts with :func:`header_line`.
"""

from __future__ import annotations

COMMAND = "python -m builders configs"


def command(pipeline: str) -> str:
    return f"{COMMAND} --pipeline {pipeline}"


def header_line(pipeline: str, comment: str = "#") -> str:
    """The first line of every generated file: that it is generated, from what and by which command."""
    return f"{comment} Generated from pipeline.toml by `{command(pipeline)}`: edit pipeline.toml, then run it."
