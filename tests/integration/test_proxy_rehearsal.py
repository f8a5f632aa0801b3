"""A rehearsal of the Kubernetes rollout on this machine: real tritonservers behind real nginx, gRPC load at c=16.

    .venv/bin/python -m pytest tests/integration/test_proxy_rehearsal.py -s   # prints the numbers

One pipeline (image_classifier, the CPU config) per server, from a model repository
root that holds only a link to that pipeline's folder. The servers sit behind
devtools.proxy.NginxProxy (gRPC through ``grpc_pass`` over HTTP/2); every client
is the real tritonclient with the shipped RetryPolicy (UNAVAILABLE retried within
10 s; the retries are counted and printed).

(a) rolling update: two backends; each in turn is drained from the proxy, sent
    SIGTERM and replaced by a new server on new ports: 0 failed requests.
HTTP/1.1 through the proxy (proxy_pass) is checked with one classification.
(b) a 9:1 split: the canary's share of >= 1000 requests, counted by the servers
    themselves (statistics API), is 10 % ± 3 points.
(c) a bad candidate (its preprocess limits max_image_pixels to 10000, a
    units typo that rejects every real photo with INVALID_ARG) at 10 %: a real
    Prometheus scrapes both servers with track=stable|canary, scripts/canary
    (--apply nginx) decides ROLLBACK and takes the canary out; every failure is
    the canary's, and none happens after the rollback.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from devtools import canary
from devtools.client import RetryPolicy, TritonConnection
from devtools.loadgen import GOLDEN_LABELS, MODEL, LoadGenerator, LoadReport, WrongAnswer, classify, copy_repository, free_port
from devtools.prometheus import LocalPrometheus, ScrapeTarget
from devtools.proxy import NginxProxy, Upstream
from devtools.triton_server import LauncherError, LocalTritonServer

pytestmark = pytest.mark.integration

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
CONCURRENCY = 16
SPLIT_REQUESTS = 1000
SERVER_ARGS = ["--metrics-config=summary_latencies=true"]
BAD_LIMIT = "10000"  # max_image_pixels of the bad candidate: every real photo is over it


def start_server(repository: Path, log_dir: Path) -> LocalTritonServer:
    """A tritonserver on free ports (started, not yet ready)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    server = LocalTritonServer(
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        model_repository=repository,
        extra_args=list(SERVER_ARGS),
        log_file=log_dir / "tritonserver.log",
    )
    server.start()
    return server


def start_servers(specs: dict[str, tuple[Path, Path]], started: list[LocalTritonServer]) -> dict[str, LocalTritonServer]:
    """Servers by name from (repository, log folder), started two at a time and ready.

    More at once on 2 busy CPUs made a Python backend stub abort at start-up here
    (boost::interprocess::lock_exception: its shared-memory locks time out when starved);
    such an abort before ready is retried once, and said so."""
    ready = {}
    names = list(specs)
    for first in range(0, len(names), 2):
        wave = {name: start_server(*specs[name]) for name in names[first : first + 2]}
        started.extend(wave.values())
        for name, server in wave.items():
            try:
                server.wait_ready(timeout_s=300)
            except LauncherError:
                code = server.process.returncode if server.process else None
                if code is None or code >= 0:
                    raise
                print(f"\n{name}: tritonserver aborted by signal {-code} during start-up; starting it again")
                server = start_server(*specs[name])
                started.append(server)
                server.wait_ready(timeout_s=300)
            ready[name] = server
    return ready


def upstream(server: LocalTritonServer) -> Upstream:
    return Upstream(http=f"127.0.0.1:{server.http_port}", grpc=f"127.0.0.1:{server.grpc_port}")


def ensemble_counts(server: LocalTritonServer, model: str = MODEL) -> tuple[int, int]:
    """(succeeded, failed) requests of the pipeline's ensemble (or ``model``), from the server's statistics API.

    Triton 2.51 counts a failed ensemble request twice in the ensemble's own failure count (the
    composing model's failure and the ensemble's); the first step's counts are one per request."""
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats", timeout=10) as response:
        stats = json.load(response)["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"]), int(stats["fail"]["count"])


def served_and_failed(server: LocalTritonServer) -> tuple[int, int]:
    """(requests received, requests failed) by one server, counted by the server.

    Received: its first step's requests (one per ensemble request; a Python model's error
    response still counts as a success there). Failed: received minus the ensemble's successes
    (the ensemble's own failure count is doubled, see ensemble_counts)."""
    received = sum(ensemble_counts(server, f"{MODEL}_preprocess"))
    return received, received - ensemble_counts(server)[0]


@dataclass
class Fleet:
    """The proxy, the good servers by backend name, and the bad candidate."""

    proxy: NginxProxy
    repository: Path
    log_root: Path
    servers: dict[str, LocalTritonServer]
    replacements: dict[str, LocalTritonServer]
    bad: LocalTritonServer
    started: list[LocalTritonServer] = field(default_factory=list)


@pytest.fixture(scope="module")
def fleet(built_repository, tmp_path_factory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("rehearsal")
    repository = root / "serving"  # only the classifier: one pipeline per server keeps five servers within 2 CPUs and memory
    repository.mkdir()
    (repository / MODEL).symlink_to(built_repository / MODEL, target_is_directory=True)
    bad_repository = root / "candidate"
    bad_repository.mkdir()
    copy_repository(built_repository / MODEL, bad_repository / MODEL)
    preprocess = bad_repository / MODEL / f"{MODEL}_preprocess" / "config.pbtxt"
    text = preprocess.read_text()
    good_limit = '{ key: "max_image_pixels" value { string_value: "50000000" } }'
    assert good_limit in text
    preprocess.write_text(text.replace(good_limit, good_limit.replace("50000000", BAD_LIMIT)))

    logs = root / "logs"
    proxy = NginxProxy(root / "proxy")
    started: list[LocalTritonServer] = []
    try:
        # The rolling update's new servers start now, as a Deployment's surge pod is ready before an
        # old pod goes: the test then spends its time on the switch, not on start-ups.
        specs = {name: (repository, logs / name) for name in ("a", "b", "a-new", "b-new")}
        ready = start_servers({**specs, "candidate": (bad_repository, logs / "candidate")}, started)
        servers = {name: ready[name] for name in ("a", "b")}
        replacements = {name: ready[f"{name}-new"] for name in ("a", "b")}
        fleet = Fleet(proxy, repository, logs, servers, replacements, ready["candidate"], started)
        proxy.set_backends({name: ([upstream(server)], 1) for name, server in servers.items()})
        proxy.start()
        yield fleet
    finally:
        proxy.stop()
        stoppers = [threading.Thread(target=server.stop) for server in started]  # SIGTERM all, then wait
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()


@dataclass
class Load:
    """LoadGenerator through the proxy; each worker's client retries with the shipped RetryPolicy."""

    url: str
    images: dict[str, bytes]
    policies: list[RetryPolicy] = field(default_factory=list)

    def sender(self, index: int):
        client = grpcclient.InferenceServerClient(self.url)
        policy = RetryPolicy(deadline_s=10.0)
        self.policies.append(policy)
        names = sorted(self.images)

        def send(request: int) -> str:
            name = names[request % len(names)]
            label = policy.call(lambda: classify(client, self.images[name], timeout_s=60))
            if label not in GOLDEN_LABELS[name]:
                raise WrongAnswer(f"wrong label: {name} -> {label}")
            return label

        return send

    @contextlib.contextmanager
    def running(self) -> Iterator[LoadGenerator]:
        generator = LoadGenerator(concurrency=CONCURRENCY, make_sender=self.sender, error_pause_s=0.0).start()
        try:
            yield generator
        finally:
            generator.stop()

    @property
    def retries(self) -> int:
        return sum(policy.retries for policy in self.policies)


@pytest.fixture
def load(fleet, photo_bytes) -> Load:
    return Load(fleet.proxy.grpc_url, {name: photo_bytes[name] for name in GOLDEN_LABELS})


def wait_for_more(generator: LoadGenerator, count: int, timeout_s: float = 120.0) -> None:
    generator.wait_for(len(generator.outcomes) + count, timeout_s=timeout_s)


def test_rolling_update_drain_sigterm_replace_loses_no_request(fleet, load):
    served: dict[str, int] = {}
    timings: dict[str, float] = {}
    stopped: dict[str, int | None] = {}
    stoppers = []
    with load.running() as generator:
        wait_for_more(generator, 2 * CONCURRENCY)
        for name in sorted(fleet.servers):
            old, new = fleet.servers[name], fleet.replacements[name]
            started = time.monotonic()
            fleet.proxy.drain(name)  # returns once nginx's old worker has finished its requests
            timings[f"drain {name}"] = round(time.monotonic() - started, 2)
            served[f"{name} (old)"] = ensemble_counts(old)[0]
            # SIGTERM; Triton takes a while to exit (its stubs), which need not hold the rollout up.
            stopper = threading.Thread(target=lambda name=name, old=old: stopped.update({name: old.stop()}))
            stopper.start()
            stoppers.append(stopper)
            fleet.servers[name] = new
            started = time.monotonic()
            fleet.proxy.set_backends({key: ([upstream(server)], 1) for key, server in fleet.servers.items()})
            timings[f"add {name}'"] = round(time.monotonic() - started, 2)
            wait_for_more(generator, 2 * CONCURRENCY)
        wait_for_more(generator, 2 * CONCURRENCY)
    for stopper in stoppers:
        stopper.join()
    report = LoadReport(sorted(generator.outcomes, key=lambda o: o.started), 0.0)
    for name, server in fleet.servers.items():
        served[f"{name}' (new)"] = ensemble_counts(server)[0]
    numbers = {"requests": len(report.outcomes), "failed": len(report.failures), "retries": load.retries, "served": served}
    print("\nrolling update:", json.dumps({**numbers, "seconds": timings, "exit_codes": stopped}))
    assert not report.failures, report.summary()["errors"]
    assert all(count > 0 for count in served.values()), served
    assert stopped == {"a": 0, "b": 0}


def test_http_through_the_proxy(fleet, photo_bytes):
    """KServe v2 over HTTP/1.1 (proxy_pass, keepalive upstreams): readiness and one classification."""
    with urllib.request.urlopen(f"http://{fleet.proxy.http_url}/v2/models/{MODEL}/ready", timeout=10) as response:
        assert response.status == 200
    connection = TritonConnection("http", fleet.proxy.http_url, timeout=60)  # the task and tensors from the model's config
    (answer,) = connection.infer(connection.pipeline_interface(MODEL), [photo_bytes["coffee"]], {"top_k": np.ones((1, 1), np.int32)})
    assert answer["labels"].shape == (1,) and answer["labels"][0].decode() in GOLDEN_LABELS["coffee"]


def test_weighted_split_90_10_within_3_points(fleet, load):
    stable, candidate = fleet.servers["a"], fleet.servers["b"]
    fleet.proxy.set_backends({"stable": ([upstream(stable)], 9), "canary": ([upstream(candidate)], 1)})
    before = {"stable": ensemble_counts(stable), "canary": ensemble_counts(candidate)}
    with load.running() as generator:
        generator.wait_for(SPLIT_REQUESTS, timeout_s=240)
    counted = {track: ensemble_counts(server)[0] - before[track][0] for track, server in (("stable", stable), ("canary", candidate))}
    share = counted["canary"] / (counted["stable"] + counted["canary"])
    print(
        "\nsplit 9:1:",
        json.dumps(
            {
                "client_requests": len(generator.outcomes),
                "served": counted,
                "canary_share_percent": round(100 * share, 2),
                "retries": load.retries,
            }
        ),
    )
    assert sum(counted.values()) >= SPLIT_REQUESTS
    assert not [o for o in generator.outcomes if not o.ok]
    assert abs(share - 0.10) <= 0.03


def run_canary_tool(prometheus_url: str, nginx_dir: Path) -> tuple[int, dict]:
    command = [
        sys.executable,
        "-m",
        "devtools.canary",
        f"--prometheus={prometheus_url}",
        f"--pipeline={MODEL}",
        "--window=30s",
        "--min-requests=100",
        "--apply=nginx",
        f"--nginx-dir={nginx_dir}",
        "--json",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY_ROOT)}
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=REPOSITORY_ROOT, check=False)
    assert result.returncode in canary.EXIT_CODES.values(), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_bad_canary_is_rolled_back_by_the_tool_and_only_its_share_fails(fleet, load):
    stable, bad = fleet.servers["a"], fleet.bad
    fleet.proxy.set_backends({"stable": ([upstream(stable)], 9), "canary": ([upstream(bad)], 1)})
    targets = [
        ScrapeTarget(f"127.0.0.1:{stable.metrics_port}", {"track": "stable"}),
        ScrapeTarget(f"127.0.0.1:{bad.metrics_port}", {"track": "canary"}),
    ]
    counts = {"stable": lambda: served_and_failed(stable), "canary": lambda: served_and_failed(bad)}
    before = {track: count() for track, count in counts.items()}
    before_ensemble = ensemble_counts(bad)
    decisions = []
    with LocalPrometheus(targets, workdir=fleet.log_root / "prometheus") as prometheus:
        prometheus.wait_until_scraped()
        with load.running() as generator:
            load_started = time.monotonic()
            deadline = load_started + 90
            code = canary.EXIT_WAIT
            while code == canary.EXIT_WAIT and time.monotonic() < deadline:
                time.sleep(1.0)
                code, report = run_canary_tool(prometheus.url, fleet.proxy.folder)
                decisions.append(report["verdict"])
            rolled_back = time.monotonic()  # the tool returns once nginx's old worker has finished its requests
            wait_for_more(generator, 10 * CONCURRENCY)
    after = {track: count() for track, count in counts.items()}
    outcomes = sorted(generator.outcomes, key=lambda o: o.started)
    before_rollback = [o for o in outcomes if o.finished <= rolled_back]
    after_rollback = [o for o in outcomes if o.started >= rolled_back]
    failures = [o for o in outcomes if not o.ok]
    canary_served, canary_failed = (after["canary"][0] - before["canary"][0], after["canary"][1] - before["canary"][1])
    stable_failed = after["stable"][1] - before["stable"][1]
    numbers = {
        "decisions": decisions,
        "seconds_to_rollback": round(rolled_back - load_started, 1),
        "requests_before_rollback": len(before_rollback),
        "failed_before_rollback": len([o for o in before_rollback if not o.ok]),
        "requests_after_rollback": len(after_rollback),
        "failed_after_rollback": len([o for o in after_rollback if not o.ok]),
        "failed_total": len(failures),
        "failed_by_server": {"stable": stable_failed, "canary": canary_failed},
        "canary_requests": canary_served,
        "canary_ensemble_failure_count": ensemble_counts(bad)[1] - before_ensemble[1],
        "tool_apply_seconds": report.get("apply_seconds"),
        "retries": load.retries,
        "checks": report["checks"],
        "errors": sorted({(o.error or "")[:120] for o in failures})[:3],
    }
    print("\nbad canary:", json.dumps(numbers, indent=1))
    assert code == canary.EXIT_ROLLBACK and report["verdict"] == "ROLLBACK" and report["applied"]
    assert NginxProxy.open(fleet.proxy.folder).backends["canary"].weight == 0
    assert stable_failed == 0 and failures
    assert all((o.error or "").startswith("INVALID_ARGUMENT") for o in failures)
    assert len(failures) == canary_failed == canary_served  # every request the canary got failed, and nothing else did
    assert not numbers["failed_after_rollback"]
    share = numbers["failed_before_rollback"] / numbers["requests_before_rollback"]
    assert abs(share - 0.10) <= 0.03 or abs(numbers["failed_before_rollback"] - 0.10 * numbers["requests_before_rollback"]) <= 3
