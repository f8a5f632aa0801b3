"""Map exceptions of the serving library to Triton error codes."""

from __future__ import annotations

from typing import Any

from ..image_codec import ImageError


def triton_error(pb_utils: Any, error: BaseException) -> Any:
    """ImageError / ValueError: the client's input is bad (INVALID_ARG); anything else is INTERNAL."""
    if isinstance(error, (ImageError, ValueError)):
        return pb_utils.TritonError(str(error), pb_utils.TritonError.INVALID_ARG)
    return pb_utils.TritonError(f"{type(error).__name__}: {error}", pb_utils.TritonError.INTERNAL)
