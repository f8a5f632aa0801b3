"""Run the real Triton server bundled in nvidia-pytriton on this machine (CPU, no Docker).

    python -m scripts.serve [--http-port 8000] [--grpc-port 8001] [--metrics-port 8002]
                            [--config-name cpu] [--no-build] [--pipeline NAME ...]

It refuses to start when one of its ports is in use (another server?), builds
every pipeline's artifacts if they are missing or stale, prepares the Python
backend (the stub matching this interpreter), starts `tritonserver` with one
``--model-repository`` per pipeline, waits for /v2/health/ready, prints each
served pipeline's client command and stops the server cleanly on Ctrl-C or
SIGTERM. ``LocalTritonServer`` is the same thing as a library, used by the
integration tests and the benchmarks.
"""

from __future__ import annotations

import argparse
import errno
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from vision_serving import cpu_sizing, layout
from vision_serving.layout import BUILD_DIR, MODEL_REPOSITORY, REPOSITORY_ROOT

DEFAULT_CONFIG_NAME = "cpu"


class LauncherError(RuntimeError):
    """The local server cannot be started; the message says what to do."""


def _pytriton_dir() -> Path:
    try:
        import pytriton
    except ImportError:
        raise LauncherError("nvidia-pytriton is not installed; run ./scripts/serve, which installs it") from None
    return Path(pytriton.__file__).resolve().parent


def _libpython_dir() -> Path:
    """Folder of this interpreter's own libpython, so the stub loads the matching one (docs/design.md, "The local server is the real tritonserver from a wheel")."""
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        raise LauncherError(
            f"{sys.executable} was built without a shared libpython; the Triton Python backend stub "
            "needs one (use a Python built with --enable-shared, such as Debian's python3)"
        )
    libdir = Path(sysconfig.get_config_var("LIBDIR"))
    if not (libdir / sysconfig.get_config_var("LDLIBRARY")).exists():
        raise LauncherError(f"libpython not found in {libdir}")
    return libdir


def prepare_backends(build_dir: Path = BUILD_DIR) -> Path:
    """A backend directory with the Python backend and the stub for this interpreter."""
    tritonserver_dir = _pytriton_dir() / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = tritonserver_dir / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise LauncherError(f"nvidia-pytriton has no Python backend stub for Python {version}")
    backend_dir = build_dir / "tritonserver" / "backends"
    python_backend = backend_dir / "python"
    python_backend.mkdir(parents=True, exist_ok=True)
    for source in [*(tritonserver_dir / "backends" / "python").glob("*.*"), stub]:
        target = python_backend / source.name
        if not target.exists() or target.stat().st_mtime < source.stat().st_mtime:
            shutil.copy2(source, target)
    return backend_dir


def server_environment() -> dict[str, str]:
    """Environment for tritonserver and the Python stubs it starts."""
    env = dict(os.environ)
    library_path = [str(_libpython_dir()), str(_pytriton_dir().parent / "nvidia_pytriton.libs")]
    if env.get("LD_LIBRARY_PATH"):
        library_path.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(library_path)
    # The stub embeds libpython, ignores PYTHONPATH and takes sys.prefix from the
    # `python3` it finds on PATH: this environment's bin/ first makes it use this
    # environment's packages (numpy<2, OpenCV, onnxruntime, the serving library).
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONNOUSERSITE"] = "1"
    # One thread per OpenCV call: Triton already runs model instances in parallel.
    env.setdefault("OMP_NUM_THREADS", "1")
    # jemalloc, as the server image's entrypoint preloads it (docker/tritonserver-pipelines.sh): glibc's malloc
    # keeps what it freed under uploads of every size. Debian's libjemalloc2 where installed; else glibc's.
    jemalloc = jemalloc_library(env)
    if jemalloc is not None:
        env["LD_PRELOAD"] = os.pathsep.join([str(jemalloc), *([env["LD_PRELOAD"]] if env.get("LD_PRELOAD") else [])])
        env.update(PRELOAD_COMPANIONS)
    return env


# What a preloaded allocator needs beside it. oneTBB (OpenVINO's threading) opens its topology library with
# RTLD_DEEPBIND, so hwloc frees with glibc what libc allocated with jemalloc: OpenVINO's compile_model aborts with
# "free(): invalid pointer". TBB_ENABLE_SANITIZERS=1 opens it without RTLD_DEEPBIND (oneTBB's own workaround).
PRELOAD_COMPANIONS = {"TBB_ENABLE_SANITIZERS": "1"}


def jemalloc_library(env: Mapping[str, str]) -> Path | None:
    """The jemalloc the server preloads: ``JEMALLOC_LIBRARY`` or the system's (``/usr/lib/<arch>-linux-gnu``); None
    where there is none or ``VISION_SERVING_MALLOC`` is ``glibc``."""
    if env.get("VISION_SERVING_MALLOC", "jemalloc") != "jemalloc":
        return None
    system = Path(f"/usr/lib/{platform.machine()}-linux-gnu")
    candidates = (
        env["JEMALLOC_LIBRARY"].split() if env.get("JEMALLOC_LIBRARY") else [system / "libjemalloc.so.2", system / "libjemalloc.so"]
    )
    return next((Path(path) for path in candidates if Path(path).is_file()), None)


def port_in_use(port: int) -> bool:
    """Whether something on this machine listens on TCP ``port`` (a bind to it, as tritonserver's on every
    address, fails with EADDRINUSE); other bind errors (a privileged port) are tritonserver's to report."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # connections in TIME_WAIT do not count
        try:
            probe.bind(("", port))
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False


def _terminate_with_parent() -> None:
    """Linux: SIGTERM the server if the process that started it dies (no orphaned servers)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class LocalTritonServer:
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    config_name: str = DEFAULT_CONFIG_NAME
    # The model repository holding the pipelines; each pipeline folder is passed as a --model-repository.
    model_repository: Path = MODEL_REPOSITORY
    exit_timeout_secs: int = 30
    extra_args: list[str] = field(default_factory=list)
    log_file: Path | None = None
    # Serve only these pipelines (their names); empty: every pipeline of the model repository.
    pipelines: list[str] = field(default_factory=list)
    # Size the Python steps for this many CPUs (default: this process's cgroup limit or affinity).
    cpus: float | None = None
    # Run the server on these CPUs only (its CPU affinity, as `taskset -c` sets it); sized to them.
    cpu_set: frozenset[int] | None = None
    process: subprocess.Popen | None = None
    # The sized steps' layouts (model name -> instances x threads), once command() has sized them.
    step_layouts: dict[str, cpu_sizing.StepLayout] = field(default_factory=dict)

    def cpu_limit(self) -> cpu_sizing.CpuLimit:
        if self.cpus is not None:
            return cpu_sizing.CpuLimit(self.cpus, "requested")
        if self.cpu_set is not None:
            return cpu_sizing.cpu_limit(affinity=lambda: len(self.cpu_set or ()))
        return cpu_sizing.cpu_limit()

    def check_ports(self) -> None:
        """``LauncherError`` in one line when two of the ports are one, or one is in use: another server's
        readiness would pass for this one's, and its sized view (.build/sized/<http port>/) is its own."""
        ports = {"--http-port": self.http_port, "--grpc-port": self.grpc_port, "--metrics-port": self.metrics_port}
        if len(set(ports.values())) < len(ports):
            given = ", ".join(f"{option} {port}" for option, port in ports.items())
            raise LauncherError(f"the three ports must differ ({given})")
        busy = [port for port in ports.values() if port_in_use(port)]
        if busy:
            which = f"port {busy[0]} is" if len(busy) == 1 else f"ports {', '.join(map(str, busy))} are"
            raise LauncherError(f"{which} in use (another server?); pass {'/'.join(ports)}")

    def sized_repositories(self) -> list[Path]:
        """The served pipelines as Triton gets them: a view (.build/sized/<http port>/) whose Python steps
        are sized to this server's CPUs (vision_serving.cpu_sizing); the model repository is not written."""
        served = self.served_pipelines()
        view = BUILD_DIR / "sized" / str(self.http_port)
        try:
            self.step_layouts = cpu_sizing.size_repository(served, view, self.cpu_limit().cpus)
        except cpu_sizing.SizingError as error:
            raise LauncherError(str(error)) from None
        return [view / pipeline.name for pipeline in served]

    def served_pipelines(self) -> list[layout.Pipeline]:
        """The pipelines this server serves (``LayoutError`` naming an unknown one)."""
        if not self.pipelines:
            return layout.pipelines(self.model_repository)
        return [layout.pipeline(name, self.model_repository) for name in self.pipelines]

    @property
    def http_url(self) -> str:
        return f"localhost:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"localhost:{self.grpc_port}"

    def command(self) -> list[str]:
        return [
            str(_pytriton_dir() / "tritonserver" / "bin" / "tritonserver"),
            *(f"--model-repository={repository}" for repository in self.sized_repositories()),
            f"--backend-directory={prepare_backends()}",
            f"--model-config-name={self.config_name}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            f"--exit-timeout-secs={self.exit_timeout_secs}",
            "--strict-readiness=true",
            "--exit-on-error=true",  # one pipeline that cannot load stops the server (docs/design.md)
            "--log-info=true",
            *self.extra_args,
        ]

    def start(self) -> None:
        self.check_ports()  # before the sized view is written
        output = open(self.log_file, "ab") if self.log_file else None  # noqa: SIM115 - the server writes to it until stop()
        self.process = subprocess.Popen(
            self.command(),
            env=server_environment(),
            stdout=output,
            stderr=subprocess.STDOUT if output else None,
            preexec_fn=self._in_child,
        )

    def _in_child(self) -> None:
        _terminate_with_parent()
        if self.cpu_set is not None:
            os.sched_setaffinity(0, self.cpu_set)

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def wait_ready(self, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                where = f"; see {self.log_file}" if self.log_file else ""
                raise LauncherError(f"tritonserver exited with code {self.process.returncode} before it was ready{where}")
            if self.is_ready():
                return
            time.sleep(0.5)
        raise LauncherError(f"tritonserver was not ready within {timeout_s:.0f} s")

    def stop(self) -> int | None:
        """SIGTERM, then wait for Triton to drain in-flight requests (its exit timeout)."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=self.exit_timeout_secs + 15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


SAMPLES_DIR = BUILD_DIR / "samples"
SAMPLE_PHOTOS = ("chelsea", "coffee", "camera", "astronaut", "grace_hopper", "motorcycle_left", "rocket", "page")


def warnings_only(log: Callable[[str], None]) -> Callable[[str], None]:
    """``log`` for the lines that start with ``warning:``; the rest dropped."""

    def filtered(message: str) -> None:
        if message.startswith("warning:"):
            log(message)

    return filtered


def build_artifacts(config_name: str | None = None, repository: Path = MODEL_REPOSITORY, names: list[str] | None = None) -> None:
    """Build what every pipeline needs to be served with ``config_name`` (idempotent: skips
    up-to-date steps), and put a few real photos in .build/samples for the clients.

    The steps are the builders' own (``builders.build_all.serving_steps``): each pipeline's core ONNX exported from
    its recipe; the INT8 Q/DQ model when the selected core config serves it (cpu_int8; ModelOpt:
    requirements/modelopt.txt); the drift reference (builders drift-reference), so the served models export drift
    statistics; one built from the user's photos is kept (a warning line when the model changed since).
    ``names``: only these pipelines."""
    from builders import BuildError, build_all, loaded, photos, stderr_logger
    from vision_serving import model_config

    chosen = [layout.pipeline(name, repository) for name in names] if names else layout.pipelines(repository)
    for folder in chosen:
        try:
            pipeline = loaded.load(folder)
            for name, call in build_all.serving_steps(pipeline, config_name):
                log = stderr_logger(f"{pipeline.name} {name}")
                # The drift reference's progress is noise at every start; its warning (a stale user reference) is not.
                call(log if name != "drift-reference" else warnings_only(log))
        except (BuildError, model_config.ConfigError) as error:
            raise LauncherError(f"cannot build {folder.name}: {error}") from None
    SAMPLES_DIR.mkdir(parents=True, exist_ok=True)
    for name in SAMPLE_PHOTOS:
        source = photos.photo_path(name)
        if not (SAMPLES_DIR / source.name).exists():
            shutil.copy2(source, SAMPLES_DIR / source.name)


def client_commands(pipelines: list[layout.Pipeline], grpc_url: str) -> list[str]:
    """Per pipeline, the client command that sends it the samples: the client of its task (its postprocess
    config's ``task`` parameter; devtools.client.client_command), with --url unless ``grpc_url`` is the
    clients' default and --model unless the pipeline is the task's default."""
    from devtools.client import DEFAULT_URLS, client_command
    from vision_serving import model_config
    from vision_serving.tasks import registry

    url = None if grpc_url == DEFAULT_URLS["grpc"] else grpc_url
    commands = []
    for pipeline in pipelines:
        try:
            task = registry.for_config(model_config.load_config(pipeline.model_dir("postprocess")))
        except model_config.ConfigError:
            continue  # the server reported it: it would not be ready
        commands.append(client_command(task.name, pipeline.name, SAMPLES_DIR.relative_to(REPOSITORY_ROOT), url))
    return commands


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # handled like Ctrl-C: drain and stop the server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    parser.add_argument(
        "--config-name",
        default=DEFAULT_CONFIG_NAME,
        help="model config variant: configs/<name>.pbtxt where a model has one (default: cpu)",
    )
    parser.add_argument("--no-build", action="store_true", help="do not build missing or stale artifacts")
    parser.add_argument("--exit-timeout-secs", type=int, default=30)
    parser.add_argument(
        "--model-repository",
        type=Path,
        default=MODEL_REPOSITORY,
        metavar="PATH",
        help="the model repository holding the pipeline folders (default: %(default)s)",
    )
    parser.add_argument(
        "--pipeline",
        action="append",
        default=[],
        metavar="NAME",
        help="serve (and build) only this pipeline; repeatable (default: every one)",
    )
    parser.add_argument(
        "--cpus",
        type=float,
        help="size the Python steps for this many CPUs (default: this process's CPU limit: cgroup, else affinity)",
    )
    args, extra = parser.parse_known_args(argv)

    server = LocalTritonServer(
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        config_name=args.config_name,
        exit_timeout_secs=args.exit_timeout_secs,
        extra_args=extra,
        model_repository=args.model_repository,
        pipelines=args.pipeline,
        cpus=args.cpus,
    )
    try:
        server.check_ports()  # before anything is built or written
        served = server.served_pipelines()
        if not args.no_build:
            print("serve: building model artifacts (skipped when up to date)...", file=sys.stderr, flush=True)
            build_artifacts(args.config_name, args.model_repository, [pipeline.name for pipeline in served])
        print(f"serve: starting tritonserver (model config '{args.config_name}')...", file=sys.stderr, flush=True)
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
        server.start()
        for name, chosen in server.step_layouts.items():
            print(f"serve: {name}: {chosen} for {server.cpu_limit()}", file=sys.stderr, flush=True)
        jemalloc = jemalloc_library(os.environ)
        allocator = (
            f"jemalloc ({jemalloc})"
            if jemalloc
            else "glibc's malloc (Debian's libjemalloc2 keeps the memory flat: docs/design.md, \"Memory stays flat\")"
        )
        print(f"serve: allocator: {allocator}", file=sys.stderr, flush=True)
        server.wait_ready()
        print(
            f"serve: ready. HTTP {server.http_url}  gRPC {server.grpc_url}  "
            f"metrics localhost:{server.metrics_port}/metrics\n"
            f"serve: pipelines: {', '.join(p.name for p in served)}\n"
            + "".join(f"serve: try  {command}\n" for command in client_commands(served, server.grpc_url))
            + "serve: Ctrl-C stops the server",
            file=sys.stderr,
            flush=True,
        )
        return server.process.wait() if server.process else 1
    except (LauncherError, layout.LayoutError) as error:
        print(f"serve: error: {error}", file=sys.stderr)
        server.stop()
        return 2
    except KeyboardInterrupt:
        print("\nserve: stopping tritonserver (draining in-flight requests)...", file=sys.stderr, flush=True)
        code = server.stop()
        return 0 if code in (0, None) else code


if __name__ == "__main__":
    sys.exit(main())
