"""The service's configuration: a TOML file (``--config``) of service settings and ``[[streams]]``, or one stream as a
JSON object through the HTTP API; both go through :meth:`StreamConfig.from_mapping`, with every default here.

A stream::

    [[streams]]
    name = "gate"                              # letters, digits, '-', '_' and '.'
    url = "rtsp://camera.local:8554/gate"      # rtsp://, rtsps://, http(s):// (MJPEG, HLS .m3u8), file path or file://
    model = "face_detector"                    # any detection pipeline (BOXES, SCORES, CLASS_IDS, LABELS, COUNT)
    fps = 10                                   # frames sent per second; the rest are skipped (not decoded to pixels)
    transport = "tcp"                          # RTSP only: "tcp" (default) or "udp"
    lines = [{ name = "door", start = [100, 400], end = [1180, 400] }]
    zones = [{ name = "desk", polygon = [[0, 0], [640, 0], [640, 360], [0, 360]] }]
    tracker = { kind = "bytetrack", lost_seconds = 1.0 }

Unknown keys are refused by name (a misspelt option never silently falls back to its default).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .analytics import ANCHORS, LineSpec, ZoneSpec
from .tracking import TrackerParameters

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
TRANSPORTS = ("tcp", "udp")
HANDOVERS = ("jpeg",)
SCHEMES = ("rtsp", "rtsps", "http", "https", "file", "")


class ConfigError(ValueError):
    """A configuration the service refuses; the message names the key and the problem."""


@dataclass(frozen=True)
class StreamConfig:
    name: str
    url: str
    model: str = "face_detector"
    fps: float = 10.0
    transport: str = "tcp"
    # The demuxer, where FFmpeg cannot tell it from the URL (e.g. "mpjpeg" for a multipart MJPEG endpoint).
    format: str | None = None
    # Read files at their own frame rate (True: as a camera would deliver them); None: files yes, network sources no.
    realtime: bool | None = None
    open_timeout_s: float = 10.0
    # No packet for this long: the source is stalled, and is reconnected.
    read_timeout_s: float = 5.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    # A reconnect within this many seconds keeps the stream's tracks and IDs (the gap is taken out of their clock).
    track_timeout_s: float = 10.0
    decode_threads: int = 1
    # A packet the decoder finds damaged is skipped and counted (FFmpeg's err_detect with explode) instead of being
    # decoded with concealment (a smeared frame, silently).
    skip_corrupt: bool = True
    # The pipeline's optional SCORE_THRESHOLD input, when set; else the pipeline's default.
    score_threshold: float | None = None
    # Only these labels are tracked (empty: all).
    labels: tuple[str, ...] = ()
    anchor: str = "center"
    lines: tuple[LineSpec, ...] = ()
    zones: tuple[ZoneSpec, ...] = ()
    tracker: TrackerParameters = field(default_factory=TrackerParameters)

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ConfigError(f"stream name {self.name!r}: use 1-63 letters, digits, '-', '_' or '.', starting with a letter or digit")
        scheme = urlparse(self.url).scheme.lower()
        if not self.url or (scheme not in SCHEMES and len(scheme) > 1):  # len 1: a Windows drive letter is a path
            raise ConfigError(f"stream {self.name!r}: url {self.url!r} is not rtsp://, rtsps://, http(s)://, file:// or a path")
        if not 0 < self.fps <= 120:
            raise ConfigError(f"stream {self.name!r}: fps must be in (0, 120], got {self.fps}")
        if self.transport not in TRANSPORTS:
            raise ConfigError(f"stream {self.name!r}: transport {self.transport!r} is not one of {', '.join(TRANSPORTS)}")
        if self.anchor not in ANCHORS:
            raise ConfigError(f"stream {self.name!r}: anchor {self.anchor!r} is not one of {', '.join(ANCHORS)}")
        for key in ("open_timeout_s", "read_timeout_s", "backoff_initial_s", "backoff_max_s"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"stream {self.name!r}: {key} must be positive, got {getattr(self, key)}")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ConfigError(f"stream {self.name!r}: backoff_max_s is below backoff_initial_s")
        if self.track_timeout_s < 0 or not 1 <= self.decode_threads <= 16:
            raise ConfigError(f"stream {self.name!r}: track_timeout_s must be >= 0 and decode_threads in 1..16")
        if self.score_threshold is not None and not 0 <= self.score_threshold <= 1:
            raise ConfigError(f"stream {self.name!r}: score_threshold must be in [0, 1], got {self.score_threshold}")
        names = [line.name for line in self.lines] + [zone.name for zone in self.zones]
        if len(set(names)) != len(names):
            raise ConfigError(f"stream {self.name!r}: line and zone names must be unique, got {names}")

    @property
    def is_file(self) -> bool:
        return urlparse(self.url).scheme.lower() in ("file", "") or len(urlparse(self.url).scheme) == 1

    @property
    def reads_realtime(self) -> bool:
        return self.is_file if self.realtime is None else self.realtime

    @classmethod
    def from_mapping(cls, values: dict[str, Any], name: str | None = None) -> StreamConfig:
        values = dict(values)
        if name is not None and values.setdefault("name", name) != name:
            raise ConfigError(f"the body's name {values['name']!r} differs from the stream's {name!r}")
        where = f"stream {values.get('name')!r}"
        known = {item.name for item in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        for key in ("name", "url"):
            if not isinstance(values.get(key), str):
                raise ConfigError(f"{where}: {key} (a string) is required")
        try:
            values["lines"] = tuple(_line(item) for item in values.get("lines", ()))
            values["zones"] = tuple(_zone(item) for item in values.get("zones", ()))
            values["tracker"] = TrackerParameters.from_mapping(dict(values.get("tracker", {})))
            values["labels"] = tuple(str(label) for label in values.get("labels", ()))
            return cls(**values)
        except ConfigError:
            raise
        except (TypeError, ValueError, KeyError) as error:
            raise ConfigError(f"{where}: {error}") from None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {item.name: getattr(self, item.name) for item in fields(self)}
        out["lines"] = [{"name": x.name, "start": list(x.start), "end": list(x.end)} for x in self.lines]
        out["zones"] = [{"name": z.name, "polygon": [list(p) for p in z.polygon]} for z in self.zones]
        out["tracker"] = {item.name: getattr(self.tracker, item.name) for item in fields(self.tracker)}
        out["labels"] = list(self.labels)
        return out


def _point(value: Any, what: str) -> tuple[float, float]:
    if not (isinstance(value, (list, tuple)) and len(value) == 2):
        raise ConfigError(f"{what}: a point is [x, y], got {value!r}")
    return float(value[0]), float(value[1])


def _line(item: dict[str, Any]) -> LineSpec:
    unknown = sorted(set(item) - {"name", "start", "end"})
    if unknown or "name" not in item:
        raise ConfigError(f"a line is {{name, start, end}}, got keys {sorted(item)}")
    return LineSpec(str(item["name"]), _point(item.get("start"), f"line {item['name']!r} start"), _point(item.get("end"), "end"))


def _zone(item: dict[str, Any]) -> ZoneSpec:
    unknown = sorted(set(item) - {"name", "polygon"})
    if unknown or "name" not in item:
        raise ConfigError(f"a zone is {{name, polygon}}, got keys {sorted(item)}")
    return ZoneSpec(str(item["name"]), tuple(_point(p, f"zone {item['name']!r}") for p in item.get("polygon", ())))


@dataclass(frozen=True)
class ServiceConfig:
    """The service: where Triton is, how frames go there, where results go, and the streams."""

    triton_url: str = "localhost:8001"
    handover: str = "jpeg"
    jpeg_quality: int = 90
    # Requests in flight per stream: a new frame while this many are unanswered replaces the waiting one (a drop).
    max_in_flight: int = 4
    # Seconds a frame's request may take before it is abandoned (counted as failed).
    request_timeout_s: float = 10.0
    # JSON lines: "-" for stdout, a path, or "" for none; every frame's tracks when tracks is true, every event always.
    jsonl: str = "-"
    jsonl_tracks: bool = True
    webhooks: tuple[str, ...] = ()
    # The webhooks get every frame's tracks too (else the events alone).
    webhook_tracks: bool = False
    webhook_retries: int = 5
    webhook_queue: int = 1000
    streams: tuple[StreamConfig, ...] = ()

    def __post_init__(self) -> None:
        if self.handover not in HANDOVERS:
            raise ConfigError(f"handover {self.handover!r} is not one of {', '.join(HANDOVERS)}")
        if not 1 <= self.jpeg_quality <= 100 or not 1 <= self.max_in_flight <= 64:
            raise ConfigError("jpeg_quality must be in 1..100 and max_in_flight in 1..64")
        names = [stream.name for stream in self.streams]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ConfigError(f"stream name(s) declared twice: {', '.join(duplicates)}")

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> ServiceConfig:
        values = dict(values)
        service = dict(values.pop("service", {}))
        streams = values.pop("streams", [])
        if values:
            raise ConfigError(f"unknown top-level key(s) {', '.join(sorted(values))}: the file has [service] and [[streams]]")
        known = {item.name for item in fields(cls)} - {"streams"}
        unknown = sorted(set(service) - known)
        if unknown:
            raise ConfigError(f"[service]: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        if "webhooks" in service:
            service["webhooks"] = tuple(service["webhooks"])
        return cls(**service, streams=tuple(StreamConfig.from_mapping(item) for item in streams))

    @classmethod
    def load(cls, path: Path) -> ServiceConfig:
        try:
            return cls.from_mapping(tomllib.loads(path.read_text()))
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{path}: {error}") from None

    def with_streams(self, streams: tuple[StreamConfig, ...]) -> ServiceConfig:
        return replace(self, streams=streams)
