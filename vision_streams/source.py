"""One stream's source: FFmpeg (PyAV) reads and decodes it in a thread of its own, paced to the stream's rate.

Every packet is demuxed and decoded (H.264 needs its reference frames), but only the frames due at the stream's
``fps`` are converted to RGB pixels and handed on; the others are counted as ``skipped``. A kept frame goes into the
stream's :class:`Mailbox`, one slot: a frame still waiting there when the next one is due was not taken in time (the
server or the CPU is behind) and is replaced, counted as ``dropped``. Nothing queues without bound.

A session ends when the source ends, fails or stalls (no packet for ``read_timeout_s``: PyAV's interrupt timeout);
the thread then reconnects after a backoff that doubles from ``backoff_initial_s`` to ``backoff_max_s`` and starts over
from ``backoff_initial_s`` once a session has delivered a frame. A packet FFmpeg flags corrupt, or one its decoder
refuses, is skipped and counted (``corrupt``; with the stream's ``skip_corrupt``, the default, FFmpeg's ``err_detect``
``explode`` makes the decoder refuse a damaged packet rather than conceal it); the session goes on.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import av
import numpy as np

from .config import StreamConfig

LOG = logging.getLogger("vision_streams.source")
# A session that decodes this many packets in a row without one frame is treated as failed (reconnected).
MAX_CONSECUTIVE_DECODE_ERRORS = 200


@dataclass(frozen=True)
class Frame:
    stream: str
    session: int  # the connection it came from: 1, 2, ... (a reconnect starts the next)
    sequence: int  # kept frames of the stream, from 1, across sessions
    pixels: np.ndarray  # RGB uint8, height x width x 3
    media_time: float  # the frame's own timestamp in its session (seconds)
    wall_time: float  # time.time() when it was decoded
    clock: float  # time.monotonic() when it was decoded
    # The stream's clock (seconds, monotonic): the session's start plus the frame's own timestamp, so a source that
    # delivers in bursts still tracks and times its dwells at the scene's pace. The tracker and analytics use it.
    stream_time: float


@dataclass
class SourceStats:
    """Counters and state of one source (written by its thread, read by the API and the metrics)."""

    state: str = "starting"  # starting, connecting, streaming, reconnecting, stopped
    session: int = 0
    decoded: int = 0
    kept: int = 0
    skipped: int = 0
    dropped: int = 0
    corrupt: int = 0
    reconnects: int = 0
    last_error: str = ""
    last_frame_wall: float = 0.0
    connected_since: float = 0.0
    width: int = 0
    height: int = 0
    codec: str = ""
    cpu_s: float = 0.0  # the source thread's CPU time (demux, decode, pacing, RGB conversion)


class Mailbox:
    """One frame between the decoding thread and the stream's async worker; a newer frame replaces a waiting one."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_drop: Callable[[], None]) -> None:
        self.loop, self.on_drop = loop, on_drop
        self.lock = threading.Lock()
        self.frame: Frame | None = None
        self.ready = asyncio.Event()

    def put(self, frame: Frame) -> None:
        with self.lock:
            replaced, self.frame = self.frame, frame
        if replaced is not None:
            self.on_drop()
        self.loop.call_soon_threadsafe(self.ready.set)

    async def get(self) -> Frame:
        while True:
            await self.ready.wait()
            with self.lock:
                frame, self.frame = self.frame, None
                self.ready.clear()
            if frame is not None:
                return frame


class Pacer:
    """Which frames of a session are due at ``fps`` by their own timestamps."""

    def __init__(self, fps: float) -> None:
        self.interval = 1.0 / fps
        self.next_due: float | None = None

    def due(self, media_time: float) -> bool:
        # Half a frame of tolerance: a 30 fps source paced to 10 fps keeps every third frame despite rounding.
        if self.next_due is None or media_time < self.next_due - 2 * self.interval or media_time > self.next_due + 2 * self.interval:
            self.next_due = media_time  # the first frame, a jump back (a loop) or a gap
        if media_time + self.interval * 0.25 < self.next_due:
            return False
        self.next_due += self.interval
        return True


def open_options(config: StreamConfig) -> dict[str, str]:
    """FFmpeg's options for the source (the AVFormat options of its protocol)."""
    if config.is_file:
        return {}
    # A live source: probe at most half a second of it (FFmpeg's default, 5 s, is read before the first frame and
    # then delivered at once: a burst the stream's pacing would drop), and keep no input buffer of FFmpeg's own.
    options = {"analyzeduration": "500000", "probesize": "500000", "fflags": "nobuffer"}
    scheme = config.url.split("://", 1)[0].lower()
    if scheme in ("rtsp", "rtsps"):
        options["rtsp_transport"] = config.transport
    return options


def describe(error: BaseException, config: StreamConfig) -> str:
    """One line saying why a session ended."""
    if isinstance(error, av.ExitError):
        return f"stalled: no data for {config.read_timeout_s:g} s (or the open took over {config.open_timeout_s:g} s)"
    text = str(error).strip() or type(error).__name__
    return f"{type(error).__name__}: {text}"[:300]


class FrameSource(threading.Thread):
    """Reads one stream until ``stop`` is set, reconnecting with backoff; hands frames to ``deliver``."""

    def __init__(
        self,
        config: StreamConfig,
        deliver: Callable[[Frame], None],
        stats: SourceStats,
        stop: threading.Event,
        report: Callable[[dict], None] = lambda event: None,
    ) -> None:
        """``deliver`` takes each kept frame, ``report`` each source event (up, down), both from this thread."""
        super().__init__(name=f"source-{config.name}", daemon=True)
        self.config, self.deliver, self.stats, self.stop, self.report = config, deliver, stats, stop, report
        self.sequence = 0

    def run(self) -> None:
        self.thread_started = time.thread_time()
        backoff = self.config.backoff_initial_s
        while not self.stop.is_set():
            self.stats.session += 1
            self.stats.state = "connecting"
            delivered_before = self.stats.kept
            try:
                self._session()
                reason = "ended: the source has no more frames"
            except Exception as error:  # any failure of FFmpeg or the network ends the session, never the thread
                reason = describe(error, self.config)
            if self.stop.is_set():
                break
            if self.stats.kept > delivered_before:
                backoff = self.config.backoff_initial_s
            self.stats.state = "reconnecting"
            self.stats.last_error = reason
            self.stats.reconnects += 1
            self.report({"event": "source_down", "session": self.stats.session, "reason": reason, "retry_in_s": backoff})
            LOG.warning("stream %s: %s; reconnecting in %.1f s", self.config.name, reason, backoff)
            self.stop.wait(backoff)
            backoff = min(backoff * 2, self.config.backoff_max_s)
        self.stats.state = "stopped"

    def _session(self) -> None:
        config = self.config
        container = av.open(
            config.url, format=config.format, options=open_options(config), timeout=(config.open_timeout_s, config.read_timeout_s)
        )
        try:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = config.decode_threads
            if config.skip_corrupt:
                stream.codec_context.options = {"err_detect": "crccheck+bitstream+buffer+explode"}
            if config.decode_threads > 1:
                stream.thread_type = "AUTO"
            self.stats.codec = stream.codec_context.name
            self._decode(container, stream)
        finally:
            container.close()

    def _decode(self, container, stream) -> None:
        config, stats = self.config, self.stats
        pacer = Pacer(config.fps)
        started, first_time = time.monotonic(), None
        self.session_start: float | None = None
        errors = 0
        for packet in container.demux(stream):
            stats.cpu_s = time.thread_time() - self.thread_started
            if self.stop.is_set():
                return
            if packet.is_corrupt:
                stats.corrupt += 1
                continue
            try:
                frames = packet.decode()
            except av.FFmpegError:  # InvalidDataError and the like: this packet only
                stats.corrupt += 1
                errors += 1
                if errors > MAX_CONSECUTIVE_DECODE_ERRORS:
                    raise
                continue
            errors = 0
            for frame in frames:
                self._frame(frame, pacer, started, first_time)
                if first_time is None:
                    first_time = frame.time or 0.0

    def _frame(self, frame, pacer: Pacer, started: float, first_time: float | None) -> None:
        config, stats = self.config, self.stats
        stats.decoded += 1
        if stats.state != "streaming":
            stats.state, stats.connected_since = "streaming", time.time()
            self.report({"event": "source_up", "session": stats.session, "codec": stats.codec})
        media_time = frame.time if frame.time is not None else time.monotonic() - started
        if config.reads_realtime and first_time is not None:
            wait = started + (media_time - first_time) - time.monotonic()
            if wait > 0 and self.stop.wait(min(wait, 5.0)):
                return
        if not pacer.due(media_time):
            stats.skipped += 1
            return
        pixels = frame.to_ndarray(format="rgb24")
        self.sequence += 1
        stats.kept += 1
        stats.height, stats.width = pixels.shape[:2]
        stats.last_frame_wall, now = time.time(), time.monotonic()
        if self.session_start is None:
            self.session_start = now - media_time
        stream_time = self.session_start + media_time
        self.deliver(Frame(config.name, stats.session, self.sequence, pixels, float(media_time), stats.last_frame_wall, now, stream_time))
