"""Errors as HTTP clients expect them: a status, a JSON body ``{"error": {"code", "message"}}``, and the headers that go
with it (``Retry-After`` on 429 and 503). Triton's statuses map to HTTP ones here, and only here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse

# Seconds a client waits before it tries again after an overload (503) or a rate limit (429, unless the limiter says).
RETRY_AFTER_S = 1


@dataclass
class ApiError(Exception):
    status: int
    code: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"

    def response(self, extra_headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(
            {"error": {"code": self.code, "message": self.message}},
            status_code=self.status,
            headers={**self.headers, **(extra_headers or {})},
        )


def bad_request(message: str, code: str = "INVALID_ARG") -> ApiError:
    return ApiError(400, code, message)


def too_large(limit: int) -> ApiError:
    return ApiError(413, "PAYLOAD_TOO_LARGE", f"the request is larger than this pipeline takes ({limit} bytes)")


def unsupported(message: str) -> ApiError:
    return ApiError(415, "UNSUPPORTED_MEDIA_TYPE", message)


def unavailable(message: str, retry_after_s: int = RETRY_AFTER_S) -> ApiError:
    return ApiError(503, "UNAVAILABLE", message, {"Retry-After": str(retry_after_s)})


# Triton's gRPC status -> (HTTP status, code). Anything else is a server fault: 500.
TRITON_STATUSES: dict[str, tuple[int, str]] = {
    "StatusCode.INVALID_ARGUMENT": (400, "INVALID_ARG"),
    "StatusCode.UNAVAILABLE": (503, "UNAVAILABLE"),
    "StatusCode.RESOURCE_EXHAUSTED": (503, "UNAVAILABLE"),
    "StatusCode.DEADLINE_EXCEEDED": (504, "DEADLINE_EXCEEDED"),
    "StatusCode.NOT_FOUND": (404, "NOT_FOUND"),
    "StatusCode.UNAUTHENTICATED": (502, "UPSTREAM_REFUSED"),
    "StatusCode.PERMISSION_DENIED": (502, "UPSTREAM_REFUSED"),
    "StatusCode.CANCELLED": (503, "UNAVAILABLE"),
}


def from_triton(error: Any) -> ApiError:
    """A ``tritonclient`` ``InferenceServerException`` as the HTTP error its status means, with the server's message."""
    status = str(error.status()) if hasattr(error, "status") else ""
    http_status, code = TRITON_STATUSES.get(status, (500, "INTERNAL"))
    message = " ".join(str(error.message() if hasattr(error, "message") else error).split()) or "the server gave no message"
    headers = {"Retry-After": str(RETRY_AFTER_S)} if http_status == 503 else {}
    return ApiError(http_status, code, message, headers)
