"""A real Prometheus on a free port, scraping local tritonservers and evaluating the bundle's alert rules.

    from devtools.prometheus import LocalPrometheus, ScrapeTarget, alert_rule_groups

    targets = [ScrapeTarget(f"localhost:{server.metrics_port}", {"track": "stable"})]
    with LocalPrometheus(targets, rule_groups=alert_rule_groups(for_divisor=60)) as prometheus:
        prometheus.wait_until_scraped()
        prometheus.query("nv_inference_request_success")   # [{"metric": {...}, "value": [t, "12"]}, ...]
        prometheus.alerts()                                  # [{"labels": {...}, "state": "pending", ...}, ...]

It runs the `prometheus` binary of the Debian package (2.42; `scripts/system-packages.sh`
installs it, with `promtool`) with a generated configuration: one static scrape config per
target, every target labelled ``service="vision-serving-metrics"`` (the label the rule
file scopes every expression to, which the ServiceMonitor's Service gives in a cluster)
plus the target's own labels; scrape and rule evaluation every second by default; TSDB in
a temporary folder removed on stop().

**Shortened `for:`** (``for_divisor``): every rule's ``for:`` is divided by the divisor,
so with 60 a minute becomes a second (``for: 10m`` → ``10s``); expressions, range windows
(``[5m]``) and thresholds are unchanged. Alerts then go pending on the same data and fire
after the same number of evaluations a 60-times-faster clock would need. Nothing here
imports pytest.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devtools.loadgen import free_port
from devtools.triton_server import _terminate_with_parent
from vision_serving import layout

# The label every alert expression selects on (k8s/prometheusrule.yaml's header): in a cluster
# the ServiceMonitor's Service adds it; here every scrape target gets it.
SERVICE_LABEL = "service"
SERVICE = "vision-serving-metrics"
INSTALL_HINT = "install the Debian package prometheus (it ships promtool); ./scripts/system-packages.sh does, as root"


class PrometheusError(RuntimeError):
    """Prometheus is missing, did not start, or answered a query with an error; the message says which."""


def tool(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``, or PrometheusError naming the package to install."""
    path = shutil.which(name)
    if path is None:
        raise PrometheusError(f"{name} is not installed: {INSTALL_HINT}")
    return path


# --------------------------------------------------------------------------- rules


def load_rule_groups(path: Path = layout.PROMETHEUS_RULE) -> list[dict[str, Any]]:
    """``spec.groups`` of a PrometheusRule: exactly the ``groups`` of a plain Prometheus rules file."""
    document = yaml.safe_load(path.read_text())
    if not isinstance(document, dict) or document.get("kind") != "PrometheusRule":
        raise PrometheusError(f"{path}: not a PrometheusRule")
    return document["spec"]["groups"]


_DURATION = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000, "y": 31_536_000_000}


def duration_ms(text: str) -> int:
    """A Prometheus duration (``1h30m``, ``10s``, ``500ms``) in milliseconds."""
    parts = _DURATION.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise PrometheusError(f"not a Prometheus duration: {text!r}")
    return sum(int(number) * _UNIT_MS[unit] for number, unit in parts)


def shorten_for(groups: Sequence[Mapping[str, Any]], divisor: float) -> list[dict[str, Any]]:
    """A copy of ``groups`` with every rule's ``for:`` divided by ``divisor`` (whole milliseconds, at least 1 ms)."""
    if divisor <= 0:
        raise PrometheusError(f"for_divisor must be positive, not {divisor}")
    shortened = copy.deepcopy([dict(group) for group in groups])
    for group in shortened:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = f"{max(1, round(duration_ms(str(rule['for'])) / divisor))}ms"
    return shortened


def alert_rule_groups(path: Path = layout.PROMETHEUS_RULE, for_divisor: float | None = None) -> list[dict[str, Any]]:
    """The PrometheusRule's groups, with ``for:`` shortened by ``for_divisor`` when given (see the module doc)."""
    groups = load_rule_groups(path)
    return shorten_for(groups, for_divisor) if for_divisor else groups


def write_rules_file(path: Path, groups: Sequence[Mapping[str, Any]]) -> Path:
    """A plain Prometheus rules file (what ``promtool check rules`` and ``rule_files`` read)."""
    path.write_text(yaml.safe_dump({"groups": [dict(group) for group in groups]}, sort_keys=False))
    return path


# --------------------------------------------------------------------------- the server


@dataclass(frozen=True)
class ScrapeTarget:
    """A ``host:port`` serving /metrics, and the labels its series get (e.g. ``{"track": "stable"}``)."""

    address: str
    labels: Mapping[str, str] = field(default_factory=dict)
    metrics_path: str = "/metrics"


def scrape_config(
    targets: Sequence[ScrapeTarget], scrape_interval: str = "1s", evaluation_interval: str = "1s", rule_files: Sequence[Path] = ()
) -> dict[str, Any]:
    """The prometheus.yml for ``targets``: one job per metrics path, one static config per target."""
    jobs: dict[str, list[dict[str, Any]]] = {}
    for target in targets:
        labels = {SERVICE_LABEL: SERVICE, **target.labels}
        jobs.setdefault(target.metrics_path, []).append({"targets": [target.address], "labels": labels})
    return {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "evaluation_interval": evaluation_interval,
        },
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {"job_name": "triton" if index == 0 else f"triton-{index}", "metrics_path": path, "static_configs": configs}
            for index, (path, configs) in enumerate(jobs.items())
        ],
    }


@dataclass
class LocalPrometheus:
    """The real ``prometheus`` on a free localhost port; a context manager (start, wait ready; stop)."""

    targets: Sequence[ScrapeTarget]
    rule_groups: Sequence[Mapping[str, Any]] = ()
    scrape_interval: str = "1s"
    evaluation_interval: str = "1s"
    workdir: Path | None = None  # config, rules, TSDB and log; a temporary folder (removed on stop) when None
    port: int = 0  # 0: a free port
    ready_timeout_s: float = 60.0
    process: subprocess.Popen | None = None
    _own_workdir: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "prometheus.log"

    def start(self) -> LocalPrometheus:
        binary = tool("prometheus")
        if self.workdir is None:
            self.workdir, self._own_workdir = Path(tempfile.mkdtemp(prefix="prometheus-")), True
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        rule_files = [write_rules_file(self.workdir / "rules.yaml", self.rule_groups)] if self.rule_groups else []
        config = scrape_config(self.targets, self.scrape_interval, self.evaluation_interval, rule_files)
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={self.workdir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_terminate_with_parent,
            )
        self.wait_ready()
        return self

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                tail = self.log_file.read_text(errors="replace")[-2000:]
                raise PrometheusError(f"prometheus exited with code {self.process.returncode} before it was ready:\n{tail}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise PrometheusError(f"prometheus was not ready within {self.ready_timeout_s:.0f} s; see {self.log_file}")

    def api(self, path: str, **params: str) -> Any:
        """``data`` of a GET on the HTTP API (``/api/v1/<path>``); PrometheusError when it reports an error."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as error:
            body = json.loads(error.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"/api/v1/{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result: ``[{"metric": {labels}, "value": [time, "value"]}, ...]`` (vectors)."""
        data = self.api("query", query=promql)
        result = data["result"]
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": result}]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (/api/v1/alerts): ``labels``, ``annotations``, ``state`` (pending | firing), ``activeAt``, ``value``."""
        return self.api("alerts")["alerts"]

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule (/api/v1/rules) with its ``health`` and ``lastError``, group by group flattened."""
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]

    def targets_health(self) -> dict[str, str]:
        """{scrape address: "up" | "down" | "unknown"} of the active targets."""
        return {target["labels"]["instance"]: target["health"] for target in self.api("targets")["activeTargets"]}

    def wait_until_scraped(self, timeout_s: float = 30.0) -> None:
        """Until every target has been scraped successfully (its ``up`` is 1)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            health = self.targets_health()
            if len(health) == len(self.targets) and all(state == "up" for state in health.values()):
                return
            time.sleep(0.2)
        raise PrometheusError(f"targets not scraped within {timeout_s:.0f} s: {self.targets_health()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalPrometheus:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
