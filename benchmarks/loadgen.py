"""A closed-loop load generator: N workers, each with its own client, one request in flight each.

Every worker thread builds its own sender (a client object is not shared
between threads), then sends back-to-back requests until told to stop. The
run has a warm-up, then a fixed measurement window:

- throughput = requests that *completed* inside the window / window length
  (what perf_analyzer reports too);
- latency percentiles over the requests that completed inside the window;
- errors over the whole run (warm-up, window and drain): a benchmark with
  any error is not a clean result.

The same generator drives every system (ensemble over gRPC or HTTP, the core
alone, the naive service), so their numbers compare.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

# A sender sends request number i and raises on any failure (transport or a
# wrong answer); a factory makes one sender per worker.
Sender = Callable[[int], None]
SenderFactory = Callable[[int], Sender]
MAX_ERROR_SAMPLES = 5


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
    setup_timeout_s: float = 60.0,
) -> LoadResult:
    """Run ``concurrency`` workers for ``warmup_s + duration_s`` and measure the window."""
    stop = threading.Event()
    ready = threading.Barrier(concurrency + 1, timeout=setup_timeout_s)
    # (start, end) of successful requests; appended from worker threads (list.append is atomic).
    done: list[tuple[float, float]] = []
    failures: list[str] = []
    setup_errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            send = make_sender(index)
        except BaseException as error:
            setup_errors.append(error)
            ready.abort()
            return
        try:
            ready.wait()
        except threading.BrokenBarrierError:
            return
        request = index
        while not stop.is_set():
            start = time.perf_counter()
            try:
                send(request)
            except Exception as error:
                failures.append(f"{type(error).__name__}: {error}"[:300])
            else:
                done.append((start, time.perf_counter()))
            request += concurrency

    threads = [threading.Thread(target=worker, args=(index,), daemon=True) for index in range(concurrency)]
    for thread in threads:
        thread.start()
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        raise RuntimeError(f"a load worker could not start: {setup_errors[0] if setup_errors else 'timeout'}") from None

    time.sleep(warmup_s)
    if on_window_start:
        on_window_start()
    window_start = time.perf_counter()
    time.sleep(duration_s)
    window_end = time.perf_counter()
    if on_window_end:
        on_window_end()
    stop.set()
    for thread in threads:
        thread.join(timeout=120)

    measured = [end - start for start, end in list(done) if window_start <= end <= window_end]
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
        error_samples=sorted(set(failures))[:MAX_ERROR_SAMPLES],
    )
