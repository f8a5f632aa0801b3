"""The image gateway as the tests run it: a real ``python -m gateway`` process in front of the run's shared tritonserver,
and a local photo server on loopback for its URL input (nothing leaves the machine)."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devtools.loadgen import free_port
from vision_serving import layout

ROOT = layout.REPOSITORY_ROOT
# The photo server's address: a loopback address of its own, which the gateway is told to allow (--fetch-allow-network);
# 127.0.0.1 stays refused.
PHOTO_HOST = "127.0.0.2"


@dataclass
class GatewayProcess:
    triton_grpc_url: str
    arguments: list[str] = field(default_factory=list)
    port: int = 0
    log_file: Path | None = None
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0, wait_for: str = "/readyz") -> None:
        """Start it and wait until ``wait_for`` answers 200 (``/healthz``: listening; ``/readyz``: serving pipelines)."""
        self.port = self.port or free_port()
        command = [
            sys.executable,
            "-m",
            "gateway",
            "--triton",
            self.triton_grpc_url,
            "--port",
            str(self.port),
            "--refresh",
            "5",
            *self.arguments,
        ]
        log = open(self.log_file, "wb") if self.log_file else subprocess.DEVNULL  # noqa: SIM115 (closed with the process)
        self.process = subprocess.Popen(
            command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)}
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the gateway exited with {self.process.returncode}: {self.log()}")
            status, body = request(f"{self.url}{wait_for}")
            if status == 200:
                return
            time.sleep(0.3)
        raise RuntimeError(f"the gateway's {wait_for} did not answer 200 in {timeout_s} s: {body}; {self.log()}")

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")[-3000:] if self.log_file and self.log_file.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def request(url: str, data: bytes | None = None, headers: dict[str, str] | None = None, method: str | None = None) -> tuple[int, Any]:
    """(status, the JSON body or the text) of one HTTP request; errors are answers too."""
    call = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(call, timeout=60) as response:
            status, raw, kind = response.status, response.read(), response.headers.get("content-type", "")
    except urllib.error.HTTPError as error:
        status, raw, kind = error.code, error.read(), error.headers.get("content-type", "")
    except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
        return 0, str(error)
    return status, json.loads(raw) if kind.startswith("application/json") else raw


def multipart(fields: dict[str, str], photo: bytes | None, filename: str = "photo.jpg") -> tuple[bytes, dict[str, str]]:
    """A multipart/form-data body (``image`` file and text fields) and its Content-Type header."""
    boundary = "----gateway-test-boundary"
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    if photo is not None:
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="{filename}"\r\nContent-Type: image/*\r\n\r\n'
        parts.append(head.encode() + photo + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


class PhotoServer:
    """A local HTTP server on PHOTO_HOST: ``/<name>`` a photo, ``/redirect?to=URL`` a 302, counting what it was asked."""

    def __init__(self, photos: dict[str, bytes], host: str = PHOTO_HOST) -> None:
        self.photos, self.requests = photos, []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                name, _, query = self.path.lstrip("/").partition("?")
                if name == "redirect":
                    self.send_response(302)
                    self.send_header("Location", urllib.parse.unquote(query.removeprefix("to=")))
                    self.end_headers()
                elif name in outer.photos:
                    self.send_response(200)
                    self.send_header("Content-Type", "image/jpeg")
                    self.send_header("Content-Length", str(len(outer.photos[name])))
                    self.end_headers()
                    self.wfile.write(outer.photos[name])
                else:
                    self.send_error(404)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://{PHOTO_HOST}:{self.port}/{path}"

    def __enter__(self) -> PhotoServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def photo_server(photo_bytes) -> Iterator[PhotoServer]:
    with PhotoServer({f"{name}.jpg": data for name, data in photo_bytes.items()}) as server:
        yield server


@pytest.fixture(scope="session")
def gateway(triton_server, photo_server, tmp_path_factory) -> Iterator[GatewayProcess]:
    """The gateway in front of the run's shared server (no admin key: it has none), URL input on for the photo server's
    address and port alone."""
    arguments = [
        "--fetch-urls",
        "--fetch-allow-network",
        f"{PHOTO_HOST}/32",
        "--fetch-scheme",
        "http",
        "--fetch-port",
        str(photo_server.port),
    ]
    process = GatewayProcess(triton_server.grpc_url, arguments, log_file=tmp_path_factory.mktemp("gateway") / "gateway.log")
    process.start()
    try:
        yield process
    finally:
        process.stop()
