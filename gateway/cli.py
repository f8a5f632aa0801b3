"""``./scripts/gateway`` (``python -m gateway``): the gateway in front of a running Triton server.

    ./scripts/gateway [--triton HOST:PORT] [--host ADDRESS] [--port N] [--api-keys FILE] [--cors-origin ORIGIN ...]
                      [--fetch-urls [--fetch-allow-host HOST ...] [--fetch-allow-network CIDR ...]
                       [--fetch-scheme https ...] [--fetch-port 443 ...]] [--timeout S]

One process, one event loop (uvloop and httptools): the API keys' rate and concurrency limits are kept in it, so run
one process per pod and scale with pods.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace
from pathlib import Path

import uvicorn

from .app import create_app
from .fetch import FetchPolicy, parse_networks
from .settings import Settings

DEFAULTS = Settings()


def parse_args(argv: list[str] | None) -> Settings:
    parser = argparse.ArgumentParser(
        prog="./scripts/gateway", description="An image-native HTTP API in front of a Triton server's pipelines."
    )
    parser.add_argument("--triton", default=DEFAULTS.triton_url, metavar="HOST:PORT", help="Triton's gRPC endpoint (default %(default)s)")
    parser.add_argument("--host", default=DEFAULTS.host, help="address to listen on (default %(default)s; 0.0.0.0 in a container)")
    parser.add_argument("--port", type=int, default=DEFAULTS.port, help="port to listen on (default %(default)s)")
    parser.add_argument("--api-keys", type=Path, metavar="FILE", help="the keys file (hashed keys and their limits); default: no keys")
    parser.add_argument(
        "--cors-origin", action="append", default=[], metavar="ORIGIN", help="an origin browsers may call from (repeatable)"
    )
    parser.add_argument(
        "--timeout", type=float, default=DEFAULTS.timeout_s, metavar="S", help="per call to the server (default %(default)s)"
    )
    parser.add_argument(
        "--refresh", type=float, default=DEFAULTS.refresh_s, metavar="S", help="read the server's pipelines every S seconds"
    )
    fetch = parser.add_argument_group("photos by URL (off by default)")
    fetch.add_argument("--fetch-urls", action="store_true", help='take {"url": ...} photos, fetched under the rules below')
    fetch.add_argument(
        "--fetch-allow-host", action="append", default=[], metavar="HOST", help="fetch only from these hosts (.example.com: its subdomains)"
    )
    fetch.add_argument("--fetch-allow-network", action="append", default=[], metavar="CIDR", help="fetch from this non-public network too")
    fetch.add_argument(
        "--fetch-scheme", action="append", choices=("http", "https"), metavar="SCHEME", help="schemes (default: https and http)"
    )
    fetch.add_argument("--fetch-port", action="append", type=int, metavar="PORT", help="ports (default: 443 and 80)")
    fetch.add_argument("--fetch-max-redirects", type=int, default=FetchPolicy().max_redirects, metavar="N")
    fetch.add_argument(
        "--fetch-timeout", type=float, default=FetchPolicy().timeout_s, metavar="S", help="for the whole fetch, redirects included"
    )
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    args = parser.parse_args(argv)
    defaults = FetchPolicy()
    policy = replace(
        defaults,
        enabled=args.fetch_urls,
        schemes=tuple(args.fetch_scheme or defaults.schemes),
        ports=tuple(args.fetch_port or defaults.ports),
        allow_hosts=tuple(args.fetch_allow_host),
        allow_networks=parse_networks(args.fetch_allow_network),
        max_redirects=args.fetch_max_redirects,
        timeout_s=args.fetch_timeout,
    )
    settings = Settings(
        triton_url=args.triton,
        host=args.host,
        port=args.port,
        api_keys=args.api_keys,
        cors_origins=tuple(args.cors_origin),
        fetch=policy,
        timeout_s=args.timeout,
        refresh_s=args.refresh,
    )
    logging.basicConfig(level=args.log_level.upper(), format="gateway: %(levelname)s %(message)s")
    return settings


def main(argv: list[str] | None = None) -> int:
    try:
        settings = parse_args(argv)
        app = create_app(settings)
    except ValueError as error:
        print(f"gateway: error: {error}", file=sys.stderr)
        return 2
    print(
        f"gateway: http://{settings.host}:{settings.port}/ (page), /docs, /openapi.json; Triton gRPC at {settings.triton_url}",
        file=sys.stderr,
    )
    uvicorn.run(app, host=settings.host, port=settings.port, loop="uvloop", http="httptools", access_log=False, log_level="warning")
    return 0
