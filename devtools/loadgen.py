"""Test helpers for reliability work: servers on copies of the repository, load, process and /dev/shm probes.

Nothing here imports pytest, so scripts and ad-hoc measurements can use it too:

    from devtools.loadgen import running_server, LoadGenerator, ResourceSampler
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from devtools.triton_server import LocalTritonServer

MODEL = "image_classifier"
# Labels EfficientNet-Lite0 gives the real photos (docs/design.md, "The reference runtime decides correctness"); a response for
# one of these images with another top-1 label counts as a failure.
GOLDEN_LABELS: dict[str, frozenset[str]] = {
    "chelsea": frozenset({"tiger cat", "Egyptian cat", "tabby"}),
    "coffee": frozenset({"espresso"}),
    "camera": frozenset({"tripod"}),
}


WRONG_LABEL = "WRONG_LABEL"


class WrongAnswer(Exception):
    """A response arrived but its answer is wrong (counted apart from errors)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def copy_repository(source: Path, destination: Path) -> Path:
    """A private copy of a model repository (tests that change versions or configs work on one)."""
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return destination


@contextlib.contextmanager
def running_server(
    repository: Path,
    log_dir: Path,
    extra_args: Sequence[str] = (),
    exit_timeout_secs: int = 30,
    ready_timeout_s: float = 240.0,
    wait_ready: bool = True,
    pipelines: Sequence[str] = (),
    cpus: float | None = None,
) -> Iterator[LocalTritonServer]:
    """A tritonserver on free ports serving ``repository`` (only ``pipelines`` if given; its Python
    steps sized for ``cpus``, default this machine's); always stopped on exit."""
    log_dir.mkdir(parents=True, exist_ok=True)
    server = LocalTritonServer(
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        model_repository=repository,
        exit_timeout_secs=exit_timeout_secs,
        extra_args=list(extra_args),
        log_file=log_dir / "tritonserver.log",
        pipelines=list(pipelines),
        cpus=cpus,
    )
    server.start()
    try:
        if wait_ready:
            server.wait_ready(timeout_s=ready_timeout_s)
        yield server
    finally:
        server.stop()


@functools.cache
def _classifier_tensors() -> tuple[str, str]:
    """(image input, labels output) of the classifier's ensemble, from its config."""
    from vision_serving import layout, model_config

    config = model_config.load_config(layout.pipeline(MODEL).ensemble_dir)
    return model_config.image_input_name(config), model_config.tensors_by_role(config).output("BYTES")


def image_input(payloads: Sequence[bytes]) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(_classifier_tensors()[0], [len(payloads), 1], "BYTES")
    tensor.set_data_from_numpy(np.array(list(payloads), dtype=np.object_).reshape(-1, 1))
    return tensor


def classify(client: grpcclient.InferenceServerClient, payload: bytes, timeout_s: float | None = None, **kwargs) -> str:
    """Top-1 label of one image through the ensemble."""
    result = client.infer(MODEL, [image_input([payload])], client_timeout=timeout_s, **kwargs)
    return result.as_numpy(_classifier_tensors()[1])[0, 0].decode()


def status_of(error: Exception) -> str:
    """``INVALID_ARGUMENT``, ``UNAVAILABLE``, ... for a gRPC error; the exception type otherwise."""
    if isinstance(error, InferenceServerException):
        return str(error.status()).removeprefix("StatusCode.")
    return type(error).__name__


# --------------------------------------------------------------------------- load


@dataclass(frozen=True)
class Outcome:
    started: float  # time.monotonic()
    finished: float
    image: str
    label: str | None = None
    error: str | None = None  # "STATUS: message" for failures and wrong labels

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def latency_s(self) -> float:
        return self.finished - self.started


@dataclass
class LoadReport:
    outcomes: list[Outcome]
    duration_s: float

    @property
    def failures(self) -> list[Outcome]:
        """Errors, timeouts and wrong labels."""
        return [outcome for outcome in self.outcomes if not outcome.ok]

    @property
    def errors(self) -> list[Outcome]:
        """Requests that did not get an answer (an error status or a timeout)."""
        return [outcome for outcome in self.failures if not (outcome.error or "").startswith(WRONG_LABEL)]

    @property
    def wrong_answers(self) -> list[Outcome]:
        """Requests answered with a top-1 label outside the image's golden set."""
        return [outcome for outcome in self.failures if (outcome.error or "").startswith(WRONG_LABEL)]

    def summary(self) -> dict:
        latencies = sorted(outcome.latency_s for outcome in self.outcomes if outcome.ok) or [float("nan")]
        errors: dict[str, int] = {}
        for outcome in self.failures:
            key = (outcome.error or "")[:160]
            errors[key] = errors.get(key, 0) + 1
        return {
            "requests": len(self.outcomes),
            "failed": len(self.errors),
            "wrong_answers": len(self.wrong_answers),
            "duration_s": round(self.duration_s, 1),
            "throughput_rps": round(len(self.outcomes) / self.duration_s, 1) if self.duration_s else 0.0,
            "latency_p50_ms": round(1000 * statistics.median(latencies), 1),
            "latency_p99_ms": round(1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 1),
            "latency_max_ms": round(1000 * latencies[-1], 1),
            "errors": errors,
        }


# A sender sends request number i and returns the answer's label (or None), raising on any failure;
# a factory makes one sender per worker thread (clients are not shared between threads).
Sender = Callable[[int], "str | None"]
SenderFactory = Callable[[int], Sender]


class LoadGenerator:
    """``concurrency`` threads, each with its own sender, sending back-to-back requests until stopped.

    By default each sender is a gRPC client classifying ``images`` in turn; every response is
    checked: an error, a timeout or a top-1 label outside the image's golden set is a failure.
    ``make_sender`` replaces it with any other request (the benchmarks' systems), and
    :func:`closed_loop` measures a window of a run. The one load generator of the project.
    """

    def __init__(
        self,
        url: str = "",
        images: dict[str, bytes] | None = None,
        expected: dict[str, frozenset[str]] | None = None,
        concurrency: int = 8,
        timeout_s: float = 60.0,
        pause_s: float = 0.0,
        error_pause_s: float = 0.05,
        make_sender: SenderFactory | None = None,
    ) -> None:
        self.url = url
        self.images = images or {}
        self.expected = expected if expected is not None else GOLDEN_LABELS
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.pause_s = pause_s
        # Back off a little after an error, as real clients do: a refusing server
        # answers at once, and spinning threads would starve it of CPU.
        self.error_pause_s = error_pause_s
        self.make_sender = make_sender or self._classifier_sender
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.outcomes: list[Outcome] = []
        self.setup_errors: list[BaseException] = []
        self._started = 0.0
        self._stopped = 0.0

    def _classifier_sender(self, index: int) -> Sender:
        client = grpcclient.InferenceServerClient(self.url)
        names = sorted(self.images)

        def send(request: int) -> str | None:
            name = names[request % len(names)]
            label = classify(client, self.images[name], timeout_s=self.timeout_s)
            if name in self.expected and label not in self.expected[name]:
                raise WrongAnswer(f"{WRONG_LABEL}: {name} -> {label!r}")
            return label

        return send

    def _image_name(self, request: int) -> str:
        names = sorted(self.images)
        return names[request % len(names)] if names else str(request)

    def _worker(self, index: int) -> None:
        try:
            send = self.make_sender(index)
        except BaseException as setup_error:
            self.setup_errors.append(setup_error)
            return
        request = index
        while not self._stop.is_set():
            started = time.monotonic()
            label: str | None = None
            error: str | None = None
            try:
                label = send(request)
            except WrongAnswer as wrong:
                error = str(wrong)
            except Exception as exc:  # every failure counts, whatever its type
                error = f"{status_of(exc)}: {exc}"
            outcome = Outcome(started, time.monotonic(), self._image_name(request), label, error)
            with self._lock:
                self.outcomes.append(outcome)
            request += self.concurrency
            failed = error is not None and not error.startswith(WRONG_LABEL)
            if self.pause_s or (failed and self.error_pause_s):
                self._stop.wait(self.pause_s + (self.error_pause_s if failed else 0.0))

    def start(self) -> LoadGenerator:
        self._started = time.monotonic()
        for index in range(self.concurrency):
            thread = threading.Thread(target=self._worker, args=(index,), name=f"load-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def wait_for(self, requests: int, timeout_s: float = 120.0) -> None:
        """Block until at least ``requests`` responses have come back."""
        deadline = time.monotonic() + timeout_s
        while len(self.outcomes) < requests:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(self.outcomes)} of {requests} responses within {timeout_s:.0f} s")
            time.sleep(0.05)

    def stop(self) -> LoadReport:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout_s + 10)
        self._stopped = time.monotonic()
        with self._lock:
            outcomes = sorted(self.outcomes, key=lambda outcome: outcome.started)
        return LoadReport(outcomes, self._stopped - self._started)

    def __enter__(self) -> LoadGenerator:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


# --------------------------------------------------------------------------- a measured window (benchmarks)


@dataclass
class LoadResult:
    concurrency: int
    duration_s: float
    completed: int
    throughput: float  # requests per second in the window
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    mean_ms: float | None
    errors: int
    error_samples: list[str] = field(default_factory=list)
    triton: dict | None = None  # per-model statistics over the window, when measured on Triton
    # CPU time over the window (benchmarks/cpu.py): the server's process tree and this client process.
    server_cpu_ms_per_request: float | None = None
    server_cpus_used: float | None = None
    client_cpu_ms_per_request: float | None = None

    def add_cpu(self, server_s: float | None, client_s: float | None) -> None:
        if self.completed and server_s is not None:
            self.server_cpu_ms_per_request = round(server_s * 1e3 / self.completed, 2)
            self.server_cpus_used = round(server_s / self.duration_s, 2)
        if self.completed and client_s is not None:
            self.client_cpu_ms_per_request = round(client_s * 1e3 / self.completed, 2)

    def as_dict(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if not (key == "triton" and value is None)}


MAX_ERROR_SAMPLES = 5


def percentiles(latencies_s: list[float]) -> dict[str, float | None]:
    if not latencies_s:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "mean_ms": None}
    values = np.asarray(latencies_s) * 1e3
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {"p50_ms": float(p50), "p95_ms": float(p95), "p99_ms": float(p99), "mean_ms": float(values.mean())}


def closed_loop(
    make_sender: SenderFactory,
    concurrency: int,
    warmup_s: float,
    duration_s: float,
    on_window_start: Callable[[], None] | None = None,
    on_window_end: Callable[[], None] | None = None,
) -> LoadResult:
    """A :class:`LoadGenerator` run of ``warmup_s + duration_s``, measured over the window.

    Throughput counts the requests that *completed* inside the window (what
    perf_analyzer reports too); latency percentiles are over those; errors over
    the whole run (warm-up, window and drain): a benchmark with any error is not
    a clean result.
    """
    generator = LoadGenerator(concurrency=concurrency, make_sender=make_sender, error_pause_s=0.0).start()
    time.sleep(warmup_s)
    if generator.setup_errors:
        generator.stop()
        raise RuntimeError(f"a load worker could not start: {generator.setup_errors[0]}")
    if on_window_start:
        on_window_start()
    window_start = time.monotonic()
    time.sleep(duration_s)
    window_end = time.monotonic()
    if on_window_end:
        on_window_end()
    report = generator.stop()
    measured = [o.latency_s for o in report.outcomes if o.ok and window_start <= o.finished <= window_end]
    failures = [o.error or "" for o in report.outcomes if not o.ok]
    elapsed = window_end - window_start
    stats = percentiles(measured)
    return LoadResult(
        concurrency=concurrency,
        duration_s=round(elapsed, 3),
        completed=len(measured),
        throughput=len(measured) / elapsed,
        p50_ms=stats["p50_ms"],
        p95_ms=stats["p95_ms"],
        p99_ms=stats["p99_ms"],
        mean_ms=stats["mean_ms"],
        errors=len(failures),
        error_samples=sorted({f[:300] for f in failures})[:MAX_ERROR_SAMPLES],
    )


# --------------------------------------------------------------------------- processes and /dev/shm


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(child) for child in handle.read().split()]
    except OSError:
        return []


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [part.decode(errors="replace") for part in handle.read().split(b"\0") if part]
    except OSError:
        return []


def stub_processes(server_pid: int) -> dict[str, int]:
    """Python backend stubs of a tritonserver: instance name (``preprocess_0_1``) -> PID.

    The stub's command line is ``stub model.py shm_region shm_size shm_growth
    parent_pid backend_dir ipc_size instance_name runtime``.
    """
    stubs = {}
    for child in _children(server_pid):
        argv = _cmdline(child)
        if argv and argv[0].endswith("triton_python_backend_stub") and len(argv) > 8:
            model_version = Path(argv[1]).parent.name
            stubs[f"{argv[8]}@v{model_version}"] = child
    return stubs


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def shm_regions(server_pid: int) -> dict[str, int]:
    """The Python backend's /dev/shm files of this server (not other servers' on the machine): name -> bytes used."""
    names = set()
    for pid in [server_pid, *_children(server_pid)]:
        try:
            with open(f"/proc/{pid}/maps") as handle:
                for line in handle:
                    path = line.rstrip("\n").split(maxsplit=5)[-1]
                    if path.startswith("/dev/shm/triton_python_backend_shm_region_"):
                        names.add(path.removesuffix(" (deleted)"))
        except OSError:
            continue
    usage = {}
    for path in names:
        try:
            usage[Path(path).name] = os.stat(path).st_blocks * 512
        except OSError:
            continue
    return usage


@dataclass
class Sample:
    t_s: float
    rss: dict[str, int]  # process name -> bytes
    shm_bytes: int
    shm_files: int


@dataclass
class ResourceSampler:
    """Samples RSS of tritonserver and each stub, and the server's /dev/shm use, every ``interval_s``."""

    server_pid: int
    interval_s: float = 5.0
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resource-sampler", daemon=True)
        self._t0 = time.monotonic()

    def sample(self) -> Sample:
        rss = {"tritonserver": rss_bytes(self.server_pid) or 0}
        for name, pid in stub_processes(self.server_pid).items():
            rss[name] = rss_bytes(pid) or 0
        shm = shm_regions(self.server_pid)
        sample = Sample(time.monotonic() - self._t0, rss, sum(shm.values()), len(shm))
        self.samples.append(sample)
        return sample

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def start(self) -> ResourceSampler:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        self._stop.set()
        self._thread.join()
        self.sample()
        return self.samples

    def growth(self, skip_fraction: float = 0.25) -> dict[str, dict[str, float]]:
        """Per process: RSS (MiB) after warm-up (the first ``skip_fraction`` of samples), at the end, and the growth."""
        if len(self.samples) < 2:
            return {}
        baseline = self.samples[min(len(self.samples) - 1, int(len(self.samples) * skip_fraction))]
        middle = self.samples[len(self.samples) // 2]
        last = self.samples[-1]
        report = {}
        for name, start in baseline.rss.items():
            end = last.rss.get(name, 0)
            peak = max(sample.rss.get(name, 0) for sample in self.samples)
            report[name] = {
                "after_warmup_mib": round(start / 2**20, 1),
                "end_mib": round(end / 2**20, 1),
                "peak_mib": round(peak / 2**20, 1),
                "growth_mib": round((end - start) / 2**20, 1),
                # A leak keeps growing; allocator warm-up (arenas sized by the largest batch seen) does not.
                "second_half_growth_mib": round((end - middle.rss.get(name, 0)) / 2**20, 1),
            }
        report["/dev/shm"] = {
            "after_warmup_mib": round(baseline.shm_bytes / 2**20, 1),
            "end_mib": round(last.shm_bytes / 2**20, 1),
            "peak_mib": round(max(sample.shm_bytes for sample in self.samples) / 2**20, 1),
            "growth_mib": round((last.shm_bytes - baseline.shm_bytes) / 2**20, 1),
            "files": last.shm_files,
        }
        return report


class ReadinessWatcher:
    """Polls the server's /v2/health/ready and a model's ready state; reports how long each was false."""

    def __init__(self, server, model: str = MODEL, interval_s: float = 0.1) -> None:
        self.server, self.model, self.interval_s = server, model, interval_s
        self.samples: list[tuple[float, bool, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="readiness", daemon=True)

    def _run(self) -> None:
        client = grpcclient.InferenceServerClient(self.server.grpc_url)
        while not self._stop.is_set():
            try:
                model_ready = client.is_model_ready(self.model)
            except Exception:
                model_ready = False
            self.samples.append((time.monotonic(), self.server.is_ready(), model_ready))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> ReadinessWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        def false_seconds(index: int) -> float:
            total = 0.0
            for (t0, *states), (t1, *_) in zip(self.samples, self.samples[1:]):
                if not states[index - 1]:
                    total += t1 - t0
            return round(total, 2)

        return {
            "samples": len(self.samples),
            "server_not_ready_s": false_seconds(1),
            "model_not_ready_s": false_seconds(2),
        }


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()
