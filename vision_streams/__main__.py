"""``python -m vision_streams``: start the stream service (``./scripts/streams`` runs this in .venv)."""

from __future__ import annotations

import os

# One BLAS thread, set before numpy loads: the tracker's Kalman filter solves 4x4 systems, which gain nothing from
# threads, and OpenBLAS's idle threads spin: measured with the tests' YOLO detector, about 37 ms of CPU per frame.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import asyncio
import logging
import signal
import sys
from dataclasses import replace
from pathlib import Path

from aiohttp import web

from . import ownership
from .config import ConfigError, ServiceConfig
from .service import Service


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m vision_streams", description=__doc__)
    parser.add_argument("--config", type=Path, help="a TOML file of [service] settings and [[streams]] (re-read when it changes)")
    parser.add_argument("--triton", help="Triton's gRPC address (default: the file's triton_url, else localhost:8001)")
    parser.add_argument("--host", default="0.0.0.0", help="the HTTP API's address (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=8080, help="the HTTP API's port: streams, preview, /metrics (default 8080)")
    parser.add_argument("--jsonl", help="JSON lines: '-' (stdout), a file, or '' (none); default: the file's, else stdout")
    parser.add_argument(
        "--peers-service",
        default=os.environ.get("STREAMS_PEERS_SERVICE", ""),
        help="a headless Service whose addresses are the replicas sharing the streams (with --me); default: one replica",
    )
    parser.add_argument("--me", default=os.environ.get("POD_IP", ""), help="this replica's address among the peers (POD_IP)")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


async def serve(arguments: argparse.Namespace) -> None:
    config = ServiceConfig.load(arguments.config) if arguments.config and arguments.config.exists() else ServiceConfig()
    if arguments.config and not arguments.config.exists():
        raise ConfigError(f"{arguments.config}: no such file")
    if arguments.triton:
        config = replace(config, triton_url=arguments.triton)
    if arguments.jsonl is not None:
        config = replace(config, jsonl=arguments.jsonl)
    membership = ownership.StaticMembership()
    if arguments.peers_service:
        if not arguments.me:
            raise ConfigError("--peers-service needs --me (this pod's address, POD_IP)")
        membership = ownership.DnsMembership(arguments.me, arguments.peers_service)  # type: ignore[assignment]
    service = Service(config, arguments.config, membership)
    await service.start()
    runner = web.AppRunner(service.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, arguments.host, arguments.port).start()
    logging.getLogger("vision_streams").info(
        "ready: http://%s:%d/streams, %d stream(s), Triton %s", arguments.host, arguments.port, len(service.workers), config.triton_url
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await runner.cleanup()
    await service.close()


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    logging.basicConfig(level=arguments.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("libav").setLevel(logging.ERROR)
    try:
        asyncio.run(serve(arguments))
    except ConfigError as error:
        print(f"vision_streams: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
