"""Prometheus metrics of the gateway, per route and status: requests, their duration, those in flight. ``route`` is the
route's template (``/v1/pipelines/{name}``), ``pipeline`` the pipeline's name on its route (bounded by the server's
pipelines: an unknown name counts as ``-``), never a raw path."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PIPELINE_PREFIX = "/v1/pipelines/"
ROUTES = ("/", "/docs", "/openapi.json", "/v1/pipelines", "/healthz", "/readyz", "/metrics")
# Buckets in seconds: from a cached answer's milliseconds to a 12 MP photo's text reading.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self, known_pipelines: Any) -> None:
        self.registry = CollectorRegistry()
        self.known_pipelines = known_pipelines  # () -> the names of the pipelines on the server now
        self.requests = Counter(
            "gateway_http_requests",
            "HTTP requests answered, by route, pipeline and status",
            ["route", "pipeline", "method", "status"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "gateway_http_request_duration_seconds",
            "time to the end of the answer",
            ["route", "pipeline"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge("gateway_http_requests_in_flight", "requests being answered", ["route"], registry=self.registry)

    def labels(self, path: str) -> tuple[str, str]:
        if path.startswith(PIPELINE_PREFIX):
            name = path.removeprefix(PIPELINE_PREFIX)
            return "/v1/pipelines/{name}", name if name in self.known_pipelines() else "-"
        if path.startswith(("/static/", "/docs/")):
            return f"/{path.split('/', 2)[1]}/*", "-"
        return (path if path in ROUTES else "other"), "-"

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    """Counts every HTTP request by route, pipeline, method and status, and times it to the last byte of its answer."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route, pipeline = self.metrics.labels(scope["path"])
        status = {"code": 500}
        started = time.perf_counter()

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        gauge = self.metrics.in_flight.labels(route)
        gauge.inc()
        try:
            await self.app(scope, receive, sending)
        finally:
            gauge.dec()
            self.metrics.requests.labels(route, pipeline, scope["method"], str(status["code"])).inc()
            self.metrics.duration.labels(route, pipeline).observe(time.perf_counter() - started)
