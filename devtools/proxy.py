"""A real L7 proxy in front of local tritonservers: Debian's nginx, run as the current user in a private folder.

    proxy = NginxProxy(Path("/tmp/proxy"))
    proxy.set_backends({"stable": ([Upstream(http="127.0.0.1:8000", grpc="127.0.0.1:8001")], 9),
                        "canary": ([Upstream(http="127.0.0.1:9000", grpc="127.0.0.1:9001")], 1)})
    proxy.start()            # HTTP/1.1 on proxy.http_url (proxy_pass), gRPC on proxy.grpc_url (HTTP/2, grpc_pass)
    proxy.drain("stable")    # out of the upstreams, reload, wait until nginx's old workers have exited
    proxy.stop()

One nginx serves two listeners, each with one weighted round-robin upstream holding
every backend's servers: a backend is a named group of servers (a Kubernetes
Service's pods) with one weight; its weight is spread over its servers so that
backends receive traffic in the ratio of their weights. Weight 0 takes a backend
out. Every change rewrites ``nginx.conf`` (and ``backends.json``, the state the
next process reads: ``NginxProxy.open(folder)``), checks it with ``nginx -t`` and
reloads gracefully (SIGHUP): new workers take new connections at once, the old
ones finish their in-flight requests, send HTTP/2 GOAWAY and exit.
:meth:`NginxProxy.reload` waits until they have gone, so when it returns no
request can reach a removed backend.

Everything (config, pid file, logs, temp files) lives in the folder; nothing in
/etc or /var is used, and as root the workers keep the current user.
"""

from __future__ import annotations

import json
import math
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devtools.triton_server import _terminate_with_parent

STATE_FILE = "backends.json"
CONFIG_FILE = "nginx.conf"
PID_FILE = "nginx.pid"


class ProxyError(RuntimeError):
    """nginx is missing, refused its config, or did not start or reload; the message says which."""


@dataclass(frozen=True)
class Upstream:
    """One server behind the proxy: its HTTP and gRPC ``host:port``."""

    http: str
    grpc: str


@dataclass(frozen=True)
class Backend:
    """A named group of servers with one weight (0: out of rotation)."""

    servers: tuple[Upstream, ...]
    weight: int


BackendSpec = tuple[Sequence[Upstream], int]


@dataclass(frozen=True)
class Timeouts:
    connect_s: int = 2  # a server that does not accept within this is marked failed and the next one tried
    read_s: int = 60  # between two reads of an upstream response (one inference)
    send_s: int = 60
    shutdown_s: int = 30  # worker_shutdown_timeout: the longest an old worker may finish its requests after a reload
    keepalive_s: int = 60  # idle keepalive connections to the upstreams


def server_weights(backends: Mapping[str, Backend]) -> list[tuple[str, Upstream, int]]:
    """(backend, server, nginx weight) for every server of every backend with a weight.

    Weights are integers per server: a backend's weight is multiplied by the least common multiple
    of the backends' server counts and divided among its servers, so backends get traffic in the
    ratio of their weights whatever their sizes (9:1 with 2 and 1 servers: 9, 9 and 2).
    """
    active = {name: backend for name, backend in backends.items() if backend.weight > 0 and backend.servers}
    if not active:
        return []
    common = math.lcm(*(len(backend.servers) for backend in active.values()))
    weights = []
    for name, backend in sorted(active.items()):
        per_server = backend.weight * common // len(backend.servers)
        weights += [(name, server, per_server) for server in backend.servers]
    divisor = math.gcd(*(weight for _, _, weight in weights))
    return [(name, server, weight // divisor) for name, server, weight in weights]


def _upstream_block(name: str, servers: list[tuple[str, str, int]], timeouts: Timeouts) -> str:
    lines = [f"    upstream {name} {{"]
    for backend, address, weight in servers:
        # max_fails/fail_timeout: a server that refuses connections is skipped for a while (passive health check).
        lines.append(f"        server {address} weight={weight} max_fails=1 fail_timeout=5s;  # {backend}")
    if not servers:
        # nginx needs a server in every upstream: a backend-less proxy answers 502 (HTTP) / UNAVAILABLE (gRPC).
        lines.append("        server 127.0.0.1:9 down;  # no backend has a weight")
    lines += [
        "        keepalive 32;",
        f"        keepalive_timeout {timeouts.keepalive_s}s;",
        "    }",
    ]
    return "\n".join(lines)


def render_config(
    folder: Path,
    http_port: int,
    grpc_port: int,
    backends: Mapping[str, Backend],
    timeouts: Timeouts = Timeouts(),
    user: str | None = None,
) -> str:
    """nginx.conf for the proxy in ``folder`` (absolute paths only, so ``nginx -p`` is not needed to read it)."""
    folder = folder.resolve()
    weights = server_weights(backends)
    http_servers = [(name, server.http, weight) for name, server, weight in weights]
    grpc_servers = [(name, server.grpc, weight) for name, server, weight in weights]
    user_line = f"user {user};\n" if user else ""
    temp = folder / "tmp"
    return f"""# Written by devtools/proxy.py; rewritten on every change of backends (see {STATE_FILE}).
{user_line}worker_processes 1;
pid {folder / PID_FILE};
error_log {folder / "logs" / "error.log"} notice;
worker_shutdown_timeout {timeouts.shutdown_s}s;

events {{
    worker_connections 1024;
}}

http {{
    log_format upstream '$remote_addr [$time_local] "$request" $status $body_bytes_sent '
                        'upstream=$upstream_addr upstream_status=$upstream_status rt=$request_time urt=$upstream_response_time';
    access_log {folder / "logs" / "access.log"} upstream;
    client_body_temp_path {temp / "body"};
    proxy_temp_path {temp / "proxy"};
    fastcgi_temp_path {temp / "fastcgi"};
    uwsgi_temp_path {temp / "uwsgi"};
    scgi_temp_path {temp / "scgi"};
    client_max_body_size 64m;
    client_body_buffer_size 1m;
    keepalive_timeout 75s;
    http2_max_concurrent_streams 128;

{_upstream_block("triton_http", http_servers, timeouts)}

{_upstream_block("triton_grpc", grpc_servers, timeouts)}

    # KServe v2 over HTTP/1.1, keepalive to the upstreams.
    server {{
        listen 127.0.0.1:{http_port};
        location / {{
            proxy_pass http://triton_http;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_connect_timeout {timeouts.connect_s}s;
            proxy_read_timeout {timeouts.read_s}s;
            proxy_send_timeout {timeouts.send_s}s;
            proxy_request_buffering off;
            # Another server only when this one could not be reached (nothing was sent).
            proxy_next_upstream error timeout;
            proxy_next_upstream_tries 2;
        }}
    }}

    # gRPC: HTTP/2 without TLS (h2c) on both sides.
    server {{
        listen 127.0.0.1:{grpc_port} http2;
        location / {{
            grpc_pass grpc://triton_grpc;
            grpc_connect_timeout {timeouts.connect_s}s;
            grpc_read_timeout {timeouts.read_s}s;
            grpc_send_timeout {timeouts.send_s}s;
            grpc_next_upstream error timeout;
            grpc_next_upstream_tries 2;
        }}
    }}
}}
"""


def nginx_binary() -> str:
    found = shutil.which("nginx") or next((path for path in ("/usr/sbin/nginx",) if os.access(path, os.X_OK)), None)
    if not found:
        raise ProxyError("nginx is not installed (Debian: apt-get install nginx-light; see scripts/system-packages.sh)")
    return found


def _children(pid: int) -> set[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return {int(child) for child in handle.read().split()}
    except OSError:
        return set()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class NginxProxy:
    """nginx in ``folder`` listening on 127.0.0.1 (free ports unless given), with weighted backends."""

    folder: Path
    http_port: int = 0
    grpc_port: int = 0
    timeouts: Timeouts = field(default_factory=Timeouts)
    backends: dict[str, Backend] = field(default_factory=dict)
    process: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        from devtools.loadgen import free_port  # numpy and tritonclient: only when ports are to be found

        self.folder = Path(self.folder).resolve()
        self.http_port = self.http_port or free_port()
        self.grpc_port = self.grpc_port or free_port()

    # ------------------------------------------------------------------ state

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def config_path(self) -> Path:
        return self.folder / CONFIG_FILE

    @classmethod
    def open(cls, folder: Path) -> NginxProxy:
        """The proxy another process started in ``folder`` (its ports and backends from backends.json)."""
        path = Path(folder) / STATE_FILE
        if not path.is_file():
            raise ProxyError(f"{path} does not exist: no proxy was started in {folder}")
        state = json.loads(path.read_text())
        backends = {
            name: Backend(tuple(Upstream(**server) for server in backend["servers"]), int(backend["weight"]))
            for name, backend in state["backends"].items()
        }
        return cls(Path(folder), http_port=state["http_port"], grpc_port=state["grpc_port"], backends=backends)

    def _write(self) -> None:
        """Render, check with ``nginx -t`` and only then put the config and state in place."""
        for sub in ("logs", "tmp"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        user = pwd.getpwuid(os.geteuid()).pw_name if os.geteuid() == 0 else None
        candidate = self.folder / f"{CONFIG_FILE}.new"
        candidate.write_text(render_config(self.folder, self.http_port, self.grpc_port, self.backends, self.timeouts, user))
        self._nginx(candidate, "-t", "-q")
        candidate.replace(self.config_path)
        state = {
            "http_port": self.http_port,
            "grpc_port": self.grpc_port,
            "backends": {
                name: {"weight": backend.weight, "servers": [{"http": s.http, "grpc": s.grpc} for s in backend.servers]}
                for name, backend in self.backends.items()
            },
        }
        (self.folder / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")

    def _command(self, config: Path, *args: str) -> list[str]:
        return [nginx_binary(), "-p", str(self.folder), "-c", str(config), "-e", str(self.folder / "logs" / "error.log"), *args]

    def _nginx(self, config: Path, *args: str) -> None:
        result = subprocess.run(self._command(config, *args), capture_output=True, text=True, timeout=30, check=False)
        if result.returncode != 0:
            raise ProxyError(f"nginx {' '.join(args)} failed: {(result.stderr or result.stdout).strip()}")

    def master_pid(self) -> int | None:
        try:
            pid = int((self.folder / PID_FILE).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if _alive(pid) else None

    def workers(self) -> set[int]:
        pid = self.master_pid()
        return {child for child in _children(pid) if _alive(child)} if pid else set()

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout_s: float = 10.0) -> NginxProxy:
        """Start nginx in the foreground (a child of this process) and wait until both ports accept."""
        self._write()
        self.process = subprocess.Popen(
            self._command(self.config_path, "-g", "daemon off;"),
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / "logs" / "nginx.stderr", "ab"),  # noqa: SIM115 - nginx writes to it until it exits
            preexec_fn=_terminate_with_parent,  # no nginx left behind if this process dies
        )
        deadline = time.monotonic() + timeout_s
        while not (self.workers() and self._accepts(self.http_port) and self._accepts(self.grpc_port)):
            if self.process.poll() is not None:
                raise ProxyError(f"nginx exited with code {self.process.returncode}; see {self.folder / 'logs'}")
            if time.monotonic() > deadline:
                self.stop()
                raise ProxyError(f"nginx did not listen on {self.http_port}/{self.grpc_port} within {timeout_s:.0f} s")
            time.sleep(0.05)
        return self

    @staticmethod
    def _accepts(port: int) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    def set_backends(self, backends: Mapping[str, BackendSpec], wait: bool = True) -> None:
        """Replace every backend (name -> (servers, weight)) and reload if nginx runs."""
        self._change({name: Backend(tuple(servers), int(weight)) for name, (servers, weight) in backends.items()}, wait)

    def set_weight(self, name: str, weight: int, wait: bool = True) -> None:
        if name not in self.backends:
            raise ProxyError(f"no backend named {name!r} (backends: {', '.join(sorted(self.backends)) or 'none'})")
        self._change({**self.backends, name: Backend(self.backends[name].servers, int(weight))}, wait)

    def _change(self, backends: dict[str, Backend], wait: bool) -> None:
        previous, self.backends = self.backends, backends
        try:
            self._write()  # nginx -t first: a refused config changes nothing
        except ProxyError:
            self.backends = previous
            raise
        self.reload(wait)

    def drain(self, name: str) -> None:
        """Take ``name`` out of rotation; returns once no nginx worker can send it a request."""
        self.set_weight(name, 0, wait=True)

    def reload(self, wait: bool = True, timeout_s: float | None = None) -> float:
        """Rewrite the config, check it and reload gracefully (SIGHUP). With ``wait``, return once the
        old workers have exited (their in-flight requests finished). Returns the seconds waited."""
        started = time.monotonic()
        self._write()
        pid = self.master_pid()
        if pid is None:
            return 0.0  # not running: the config is used at start()
        old = self.workers()
        os.kill(pid, signal.SIGHUP)
        if not wait:
            return 0.0
        deadline = started + (timeout_s if timeout_s is not None else self.timeouts.shutdown_s + 10)
        while True:
            current = self.workers()
            if not (old & current) and current - old:
                return time.monotonic() - started
            if time.monotonic() > deadline:
                raise ProxyError(f"nginx's old workers {sorted(old & current)} had not exited {deadline - started:.0f} s after the reload")
            time.sleep(0.02)

    def stop(self, timeout_s: float = 15.0) -> None:
        """Graceful stop (SIGQUIT: in-flight requests finish), then SIGKILL after ``timeout_s``."""
        pid = self.master_pid()
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGQUIT)
                try:
                    self.process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        elif pid is not None:
            os.kill(pid, signal.SIGQUIT)

    def __enter__(self) -> NginxProxy:
        return self if self.process is not None else self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
