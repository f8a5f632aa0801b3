"""The gateway's settings, with their defaults here and only here (the command line sets them: :mod:`gateway.cli`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .fetch import FetchPolicy


@dataclass(frozen=True)
class Settings:
    triton_url: str = "localhost:8001"  # Triton's gRPC endpoint: inference, metadata, configs (no admin key)
    host: str = "127.0.0.1"
    port: int = 8080
    api_keys: Path | None = None  # the keys file (gateway.access); None: every request is admitted
    cors_origins: tuple[str, ...] = ()  # origins a browser may call the API from; none: no CORS headers
    fetch: FetchPolicy = field(default_factory=FetchPolicy)
    timeout_s: float = 30.0  # per call to the server
    refresh_s: float = 30.0  # how often the server's pipelines are read again
    title: str = "Vision pipelines"
