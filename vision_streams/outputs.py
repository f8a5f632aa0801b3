"""Where a stream's results go: JSON lines (stdout or a file) and webhooks.

Each record is one JSON object on one line: ``{"type": "frame", ...}`` with a frame's tracks (when the service's
``jsonl_tracks`` is true) and ``{"type": "event", ...}`` for every line crossing, zone entry and exit, source up and
down and track reset. The webhooks get the events (and the frames too when ``webhook_tracks`` is set) as POSTs of a
JSON array of up to :data:`WEBHOOK_BATCH` records, retried with doubling waits (0.5 s, 1 s, ... up to 8 s) on a
connection error or a 5xx/429 answer, ``webhook_retries`` times; its queue holds ``webhook_queue`` records, and what
does not fit, or runs out of retries, is counted (``dropped``), never waited for.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from dataclasses import dataclass, field
from typing import IO, Any

import aiohttp

LOG = logging.getLogger("vision_streams.outputs")
WEBHOOK_BATCH = 100
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


def json_line(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


@dataclass
class WebhookStats:
    sent: int = 0
    retried: int = 0
    dropped: int = 0
    last_error: str = ""


@dataclass
class Webhook:
    url: str
    retries: int = 5
    capacity: int = 1000
    stats: WebhookStats = field(default_factory=WebhookStats)

    def __post_init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(self.capacity)

    def offer(self, record: dict[str, Any]) -> None:
        try:
            self.queue.put_nowait(record)
        except asyncio.QueueFull:
            self.stats.dropped += 1

    async def run(self, session: aiohttp.ClientSession) -> None:
        while True:
            batch = [await self.queue.get()]
            while len(batch) < WEBHOOK_BATCH and not self.queue.empty():
                batch.append(self.queue.get_nowait())
            if await self._post(session, batch):
                self.stats.sent += len(batch)
            else:
                self.stats.dropped += len(batch)

    async def _post(self, session: aiohttp.ClientSession, batch: list[dict[str, Any]]) -> bool:
        wait = 0.5
        for attempt in range(self.retries + 1):
            try:
                async with session.post(self.url, json=batch, timeout=aiohttp.ClientTimeout(total=10)) as response:
                    if response.status < 300:
                        return True
                    self.stats.last_error = f"HTTP {response.status}"
                    if response.status not in RETRY_STATUSES:
                        LOG.warning("webhook %s refused %d records: HTTP %d (not retried)", self.url, len(batch), response.status)
                        return False
            except (TimeoutError, aiohttp.ClientError) as error:
                self.stats.last_error = f"{type(error).__name__}: {error}"[:200]
            if attempt < self.retries:
                self.stats.retried += 1
                await asyncio.sleep(wait)
                wait = min(wait * 2, 8.0)
        LOG.warning("webhook %s: %d records dropped after %d tries (%s)", self.url, len(batch), self.retries + 1, self.stats.last_error)
        return False


class Sink:
    """The service's JSON lines writer and webhooks (one each for every stream)."""

    def __init__(self, jsonl: str, tracks: bool, webhooks: list[Webhook], webhook_tracks: bool = False) -> None:
        self.tracks, self.webhooks, self.webhook_tracks = tracks, webhooks, webhook_tracks
        self.file: IO[str] | None = None
        if jsonl == "-":
            self.file = sys.stdout
            if hasattr(sys.stdout, "reconfigure"):
                sys.stdout.reconfigure(line_buffering=True)  # a pipe (a pod's log) gets each record as it is written
        elif jsonl:
            self.file = open(jsonl, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - held for the service's life
        self.tasks: list[asyncio.Task] = []
        self.session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self.webhooks:
            self.session = aiohttp.ClientSession()
            self.tasks = [asyncio.create_task(hook.run(self.session), name=f"webhook {hook.url}") for hook in self.webhooks]

    def frame(self, record: dict[str, Any]) -> None:
        record = {"type": "frame", **record}
        if self.tracks and self.file is not None:
            self.file.write(json_line(record) + "\n")
        if self.webhook_tracks:
            for hook in self.webhooks:
                hook.offer(record)

    def event(self, record: dict[str, Any]) -> None:
        record = {"type": "event", **record}
        if self.file is not None:
            self.file.write(json_line(record) + "\n")
        for hook in self.webhooks:
            hook.offer(record)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.session is not None:
            await self.session.close()
        if self.file is not None and self.file is not sys.stdout:
            self.file.close()

    def state(self) -> list[dict[str, Any]]:
        return [{"url": hook.url, "queued": hook.queue.qsize(), **vars(hook.stats)} for hook in self.webhooks]
