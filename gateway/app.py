"""The gateway's HTTP application (Starlette): the API, its OpenAPI document and interactive docs, the page, health and
metrics. ``create_app`` builds it from :class:`~gateway.settings.Settings`; uvicorn serves it (:mod:`gateway.cli`)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from tritonclient.grpc import aio as grpcaio

from . import access, openapi, uploads
from .catalog import Catalog, ModelSource
from .errors import ApiError
from .metrics import Metrics, MetricsMiddleware
from .service import TRITON_SECONDS, Gateway
from .settings import Settings

LOG = logging.getLogger("gateway")
STATIC = Path(__file__).resolve().parent / "static"
# The page and the docs load nothing from elsewhere: no CDN, no inline script.
PAGE_POLICY = (
    "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'"
)
# Swagger UI sets inline styles and shows data: images.
DOCS_POLICY = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'"


def swagger_ui_assets() -> Path:
    """The folder of Swagger UI's files in the pinned ``swagger-ui-py`` wheel (found without importing the package)."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("swagger-ui-py is not installed (requirements/gateway.txt)")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


# gRPC to Triton: messages as large as tritonclient allows, and every address the target resolves to used in turn
# (a headless Service's pods: dns:///name:port), as tritonclient's keepalive defaults keep the channel alive.
CHANNEL_ARGS = [
    ("grpc.max_send_message_length", 2**31 - 1),
    ("grpc.max_receive_message_length", 2**31 - 1),
    ("grpc.lb_policy_name", "round_robin"),
    ("grpc.keepalive_time_ms", 2**31 - 1),
    ("grpc.keepalive_timeout_ms", 20000),
    ("grpc.keepalive_permit_without_calls", False),
    ("grpc.http2.max_pings_without_data", 2),
]


class JsonResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


@dataclass
class State:
    """What the endpoints share: the settings, the keys, the metrics and, once started, the gateway."""

    settings: Settings
    keys: access.KeyRing | None
    metrics: Metrics
    client: Any = None  # a given client (tests); None: one is made at start
    gateway: Gateway | None = None


def state_of(request: Request) -> State:
    return request.app.state.gateway


def gateway_of(request: Request) -> Gateway:
    found = state_of(request).gateway
    assert found is not None, "the application has not started"
    return found


async def infer(request: Request) -> Response:
    started = time.perf_counter()
    keys = state_of(request).keys
    with keys.admit(request.headers.get(access.HEADER)) if keys else contextlib.nullcontext():
        pipeline = await gateway_of(request).pipeline(request.path_params["name"])
        upload = await uploads.read_upload(request, pipeline.max_image_bytes)
        response = JsonResponse(await gateway_of(request).answer(pipeline, upload))
    # Server-Timing (W3C): the time in Triton's call and the gateway's own, in ms, as browsers' devtools show them.
    triton_ms = TRITON_SECONDS.get() * 1e3
    own_ms = (time.perf_counter() - started) * 1e3 - triton_ms
    response.headers["Server-Timing"] = f"triton;dur={triton_ms:.3f}, gateway;dur={own_ms:.3f}"
    return response


async def pipelines(request: Request) -> Response:
    return JsonResponse(openapi.listing(await gateway_of(request).pipelines()))


async def openapi_json(request: Request) -> Response:
    state = state_of(request)
    return JsonResponse(openapi.document(await gateway_of(request).pipelines(), state.keys is not None, state.settings.title))


async def healthz(request: Request) -> Response:
    return JsonResponse({"live": True})


async def readyz(request: Request) -> Response:
    gateway = gateway_of(request)
    try:
        ready = bool(await gateway.client.is_server_ready(client_timeout=5))
    except Exception:
        ready = False
    served = sorted(gateway.catalog.pipelines)
    body = {"ready": ready and bool(served), "server_ready": ready, "pipelines": served, "not_served": gateway.catalog.problems}
    return JsonResponse(body, status_code=200 if body["ready"] else 503)


async def metrics_endpoint(request: Request) -> Response:
    content, media_type = state_of(request).metrics.exposition()
    return Response(content, media_type=media_type)


def page(name: str, policy: str) -> Any:
    """An endpoint serving one of gateway/static's pages under its Content-Security-Policy."""

    async def endpoint(request: Request) -> Response:
        return FileResponse(STATIC / name, headers={"Content-Security-Policy": policy, "X-Content-Type-Options": "nosniff"})

    return endpoint


async def api_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, ApiError)
    return error.response()


async def http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(error.status_code, "HTTP_ERROR")
    return ApiError(error.status_code, code, str(error.detail), dict(error.headers or {})).response()


async def server_error(request: Request, error: Exception) -> Response:
    LOG.exception("unexpected error on %s", request.url.path, exc_info=error)
    return ApiError(500, "INTERNAL", f"the gateway failed: {type(error).__name__}").response()


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """The gRPC client (made in the running loop), the catalogue and its refresher, for the application's life."""
    state: State = app.state.gateway
    settings = state.settings
    triton = state.client or grpcaio.InferenceServerClient(settings.triton_url, channel_args=CHANNEL_ARGS)
    catalog = Catalog(ModelSource(triton, settings.timeout_s), refresh_s=settings.refresh_s)
    state.gateway = Gateway(triton, catalog, settings.fetch, settings.timeout_s)
    refresher = asyncio.create_task(catalog.keep_fresh())
    try:
        yield
    finally:
        refresher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await refresher
        if state.client is None:
            await triton.close()


ROUTES = [
    Route("/", page("index.html", PAGE_POLICY)),
    Mount("/static", StaticFiles(directory=STATIC), name="static"),
    Route("/docs", page("docs.html", DOCS_POLICY)),
    Route("/openapi.json", openapi_json),
    Route("/v1/pipelines", pipelines),
    Route("/v1/pipelines/{name}", infer, methods=["POST"]),
    Route("/healthz", healthz),
    Route("/readyz", readyz),
    Route("/metrics", metrics_endpoint),
]


def create_app(settings: Settings, client: Any = None) -> Starlette:
    """The application; ``client``: a ``tritonclient.grpc.aio`` client (None: one to ``settings.triton_url``, made when
    the application starts, in its event loop)."""
    state = State(settings, access.KeyRing.load(settings.api_keys) if settings.api_keys else None, Metrics(lambda: {}), client)
    state.metrics.known_pipelines = lambda: state.gateway.catalog.pipelines if state.gateway else {}
    middleware = [Middleware(MetricsMiddleware, metrics=state.metrics)]
    if settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Content-Type", access.HEADER],
                expose_headers=["Retry-After", "Server-Timing"],
                max_age=600,
            )
        )
    docs_assets = Mount("/docs/assets", StaticFiles(directory=swagger_ui_assets()), name="docs-assets")
    app = Starlette(
        routes=[*ROUTES, docs_assets],
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={ApiError: api_error, HTTPException: http_error, Exception: server_error},
    )
    app.state.gateway = state
    return app
