"""Builders: produce the model repository's artifacts from pinned inputs.

Each named step (``export`` now; ``check``, ``fix``, ``quantize``,
``evaluate``, ``build-engine`` later) is a module with a plain function and a
subcommand of ``python -m builders``. Steps read tensor names, dims and
preprocessing parameters from the model repository's configs, never from
literals, and record the hashes of their inputs beside what they write.
"""


class BuildError(Exception):
    """A step cannot run or its result failed a check; the message says why.

    ``exit_code`` 2 is a user error (missing file, bad configuration); a
    failed verification uses 1.
    """

    exit_code = 2
