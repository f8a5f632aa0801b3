"""The service: the streams it runs (from its config file and its HTTP API), and the HTTP API itself (aiohttp).

Streams come from two places: the config file's ``[[streams]]`` (re-read when the file changes: every
``CONFIG_POLL_S``; a file that does not parse is reported in ``GET /status`` and the running streams carry on), and the
API (``PUT``/``DELETE /streams/<name>``, kept in memory: a restart forgets them; permanent streams belong in the file).
A name is one or the other: the API refuses to change a stream the file declares. A stream whose config changes is
restarted; the others never notice. With several replicas each runs the streams it owns (:mod:`.ownership`).

Endpoints: ``GET /streams`` (every stream's state), ``GET|PUT|DELETE /streams/<name>``, ``GET
/streams/<name>/preview`` (a page) and ``/preview.mjpeg``, ``GET /status``, ``GET /metrics`` (Prometheus),
``GET /healthz`` (live) and ``/readyz`` (the service is up; it does not wait for Triton: a stream's failed requests
say that).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import ownership, preview
from .config import ConfigError, ServiceConfig, StreamConfig
from .detector import Detector
from .metrics import Metrics
from .outputs import Sink, Webhook
from .worker import StreamWorker

LOG = logging.getLogger("vision_streams")
CONFIG_POLL_S = 2.0
MEMBERSHIP_POLL_S = 5.0
PREVIEW_FPS = 10.0


class Service:
    def __init__(self, config: ServiceConfig, config_file: Path | None = None, membership=None) -> None:
        self.config, self.config_file = config, config_file
        self.membership = membership or ownership.StaticMembership()
        self.members = self.membership.members()
        self.file_streams: dict[str, StreamConfig] = {s.name: s for s in config.streams}
        self.api_streams: dict[str, StreamConfig] = {}
        self.workers: dict[str, StreamWorker] = {}
        self.config_error = ""
        self.config_mtime = config_file.stat().st_mtime_ns if config_file and config_file.exists() else 0
        self.executor = ThreadPoolExecutor(max(2, os.cpu_count() or 2), thread_name_prefix="encode")
        self.metrics = Metrics(lambda: list(self.workers.values()))
        hooks = [Webhook(url, config.webhook_retries, config.webhook_queue) for url in config.webhooks]
        self.sink = Sink(config.jsonl, config.jsonl_tracks, hooks, config.webhook_tracks)
        self.detector: Detector | None = None
        self.lock = asyncio.Lock()
        self.background: list[asyncio.Task] = []

    # ---------------------------------------------------------------- streams

    def desired(self) -> dict[str, StreamConfig]:
        wanted = {**self.file_streams, **self.api_streams}
        return {name: stream for name, stream in wanted.items() if self.owns(name)}

    def owns(self, name: str) -> bool:
        return ownership.owner(name, self.members) == self.membership.me

    async def reconcile(self) -> None:
        """Start, restart and stop workers until they match the desired streams."""
        async with self.lock:
            wanted = self.desired()
            for name in [name for name, worker in self.workers.items() if wanted.get(name) != worker.config]:
                worker = self.workers.pop(name)
                await worker.stop()
                self.metrics.forget(name)
                LOG.info("stream %s stopped", name)
            for name, stream in wanted.items():
                if name not in self.workers:
                    assert self.detector is not None
                    worker = StreamWorker(stream, self.config, self.detector, self.sink, self.metrics.observe_latency)
                    await worker.start()
                    self.workers[name] = worker
                    LOG.info("stream %s started: %s -> %s at %g fps", name, stream.url, stream.model, stream.fps)

    async def start(self) -> None:
        self.detector = Detector(self.config.triton_url, self.executor, self.config.jpeg_quality, self.config.request_timeout_s)
        await self.sink.start()
        await self.reconcile()
        self.background = [asyncio.create_task(self._watch_config()), asyncio.create_task(self._watch_members())]

    async def close(self) -> None:
        for task in self.background:
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        for worker in list(self.workers.values()):
            await worker.stop()
        self.workers.clear()
        await self.sink.close()
        if self.detector is not None:
            await self.detector.close()
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def _watch_config(self) -> None:
        while self.config_file is not None:
            await asyncio.sleep(CONFIG_POLL_S)
            try:
                mtime = self.config_file.stat().st_mtime_ns
            except OSError as error:
                self.config_error = f"{self.config_file}: {error.strerror}"
                continue
            if mtime == self.config_mtime:
                continue
            self.config_mtime = mtime
            try:
                loaded = ServiceConfig.load(self.config_file)
            except (ConfigError, OSError) as error:
                self.config_error = str(error)
                LOG.error("config %s not applied: %s", self.config_file, error)
                continue
            self.config_error = ""
            self.file_streams = {s.name: s for s in loaded.streams}
            for name in set(self.file_streams) & set(self.api_streams):
                del self.api_streams[name]  # the file now declares it
            LOG.info("config %s reloaded: %d streams", self.config_file, len(self.file_streams))
            await self.reconcile()

    async def _watch_members(self) -> None:
        while True:
            await asyncio.sleep(MEMBERSHIP_POLL_S)
            members = await asyncio.get_running_loop().run_in_executor(None, self.membership.members)
            if members != self.members:
                LOG.info("members changed: %s -> %s", self.members, members)
                self.members = members
                await self.reconcile()

    # ---------------------------------------------------------------- HTTP API

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 20)
        app.add_routes(
            [
                web.get("/streams", self.list_streams),
                web.get("/streams/{name}", self.get_stream),
                web.put("/streams/{name}", self.put_stream),
                web.delete("/streams/{name}", self.delete_stream),
                web.get("/streams/{name}/preview", self.preview_page),
                web.get("/streams/{name}/preview.mjpeg", self.preview_mjpeg),
                web.get("/status", self.status),
                web.get("/metrics", self.prometheus),
                web.get("/healthz", self.health),
                web.get("/readyz", self.health),
            ]
        )
        return app

    def _worker(self, request: web.Request) -> StreamWorker:
        name = request.match_info["name"]
        worker = self.workers.get(name)
        if worker is None:
            if name in {**self.file_streams, **self.api_streams}:
                raise _error(409, f"stream {name!r} is run by replica {ownership.owner(name, self.members)}, not this one")
            raise _error(404, f"no stream {name!r}")
        return worker

    async def list_streams(self, request: web.Request) -> web.Response:
        return web.json_response({"streams": [worker.state() for worker in self.workers.values()]})

    async def get_stream(self, request: web.Request) -> web.Response:
        worker = self._worker(request)
        return web.json_response({**worker.state(), "config": worker.config.as_json()})

    async def put_stream(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name in self.file_streams:
            raise _error(409, f"stream {name!r} is declared in the config file {self.config_file}: change it there")
        try:
            body = await request.json()
        except json.JSONDecodeError as error:
            raise _error(400, f"the body is not JSON: {error}") from None
        if not isinstance(body, dict):
            raise _error(400, "the body is one JSON object: the stream's settings")
        try:
            stream = StreamConfig.from_mapping(body, name=name)
        except ConfigError as error:
            raise _error(400, str(error)) from None
        if not self.owns(name):
            raise _error(409, f"stream {name!r} belongs to replica {ownership.owner(name, self.members)}: add it there or in the ConfigMap")
        created = name not in self.api_streams
        self.api_streams[name] = stream
        await self.reconcile()
        return web.json_response(self.workers[name].state(), status=201 if created else 200)

    async def delete_stream(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name in self.file_streams:
            raise _error(409, f"stream {name!r} is declared in the config file {self.config_file}: remove it there")
        if self.api_streams.pop(name, None) is None:
            raise _error(404, f"no stream {name!r}")
        await self.reconcile()
        return web.json_response({"deleted": name})

    async def status(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = {
            "triton": self.config.triton_url,
            "config_file": str(self.config_file) if self.config_file else None,
            "config_error": self.config_error,
            "me": self.membership.me,
            "members": self.members,
            "streams": sorted(self.workers),
            "webhooks": self.sink.state(),
        }
        return web.json_response(body)

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def preview_page(self, request: web.Request) -> web.Response:
        worker = self._worker(request)
        return web.Response(text=preview.page(worker.config.name), content_type="text/html")

    async def preview_mjpeg(self, request: web.Request) -> web.StreamResponse:
        worker = self._worker(request)
        response = web.StreamResponse(headers={"Content-Type": f"multipart/x-mixed-replace; boundary={preview.BOUNDARY}"})
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        last = -1
        while worker is self.workers.get(worker.config.name):
            shown = worker.shown
            if shown is not None and shown.sequence != last:
                last = shown.sequence
                part = await loop.run_in_executor(self.executor, _preview_part, shown, worker)
                try:
                    await response.write(part)
                except (ConnectionResetError, RuntimeError):
                    break
            await asyncio.sleep(1.0 / PREVIEW_FPS)
        return response


def _preview_part(shown, worker: StreamWorker) -> bytes:
    return preview.mjpeg_part(preview.draw(shown.frame.pixels, shown.tracks, worker.analytics))


def _error(status: int, message: str) -> web.HTTPException:
    kinds = {400: web.HTTPBadRequest, 404: web.HTTPNotFound, 409: web.HTTPConflict}
    return kinds[status](text=json.dumps({"error": message}), content_type="application/json")
