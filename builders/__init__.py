"""Builders: produce each pipeline's artifacts in the model repository from pinned inputs.

Each named step (``export``, ``check``, ``fix``, ``quantize``, ``evaluate``,
``select-precision``, ``drift-reference``, ``build-engine``, ``verify-plan``)
is a module with a plain function and a subcommand of ``python -m builders``
(:mod:`builders.cli`) that runs on one pipeline (``--pipeline``); ``all`` runs
the CPU steps of every pipeline in order, ``new-pipeline`` starts a
pipeline folder, and ``configs`` writes the configs generated from each
core's ``config.pbtxt`` (its CPU variants, the dims that mirror it). Steps read tensor names, dims and preprocessing parameters
from the model repository's configs, never from literals, and record the
hashes of their inputs beside what they write.
"""

import sys
from collections.abc import Callable

Log = Callable[[str], None]


class BuildError(Exception):
    """A step cannot run or its result failed a check; the message says why.

    ``exit_code`` 2 is a user error (missing file, bad configuration); a
    failed verification uses 1.
    """

    exit_code = 2


class CheckFailed(BuildError):
    """A step's result failed a verification or gate; nothing was written."""

    exit_code = 1


def stderr_logger(step: str) -> Log:
    """Progress lines for one step, prefixed with its name, on stderr."""

    def log(message: str) -> None:
        print(f"{step}: {message}", file=sys.stderr, flush=True)

    return log
