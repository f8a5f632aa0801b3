"""Promote or roll back a canary by comparing it with the stable track in Prometheus.

    python -m devtools.canary --prometheus http://prometheus:9090 --pipeline image_classifier
                              [--track-label track] [--selector 'namespace="vision-serving"']
                              [--window 5m] [--min-requests 200] [--max-error-rate-delta 0.005]
                              [--max-p95-ratio 1.5] [--drift-p-value 0.01]
                              [--apply none|nginx|kubectl] [--yes] [--json]

Every series is selected by ``<track-label>="stable"`` or ``"canary"`` (the
ServiceMonitor adds the label; ``--selector`` adds more matchers), and by the
pipeline's ensemble (the model named after the pipeline). Three checks:

- error rate: failed / (succeeded + failed) ensemble requests over ``--window``
  (``increase`` of nv_inference_request_success/_failure); the canary fails if
  its rate exceeds the stable one by more than ``--max-error-rate-delta``;
- p95 latency: Triton's own quantile ``nv_inference_request_summary_us{quantile="0.95"}``
  of the ensemble (end-to-end request time in the server; exported with
  ``--metrics-config=summary_latencies=true``), the highest over each track's
  pods; the canary fails if it is more than ``--max-p95-ratio`` times stable's;
- drift: ``vision_drift_p_value{pipeline,model,feature}`` (the monitoring
  exporter's test of each feature against its reference); the canary fails on a
  feature whose p-value is below ``--drift-p-value`` while stable's is not (both
  drifting is the traffic, not the candidate).

A check without series is "n/a" and never fails. The verdict: ROLLBACK if any
check fails; WAIT while the canary has served fewer than ``--min-requests``
requests (unless its failures already exceed the budget at that count: then
ROLLBACK at once); PROMOTE otherwise.

Actions (``--apply``): ``none`` (default) only decides. ``nginx`` rewrites the
weights of the local rehearsal's proxy (devtools/proxy.py, ``--nginx-dir``):
ROLLBACK takes the canary backend out, PROMOTE gives it all traffic; the
command returns once nginx's old workers have finished their requests.
``kubectl`` prints the commands (``--yes`` runs them, :mod:`devtools.promotion`):
ROLLBACK sets the routes' weights to stable 100 / canary 0 and deletes the canary
Deployment; PROMOTE sets the stable Deployment's images to ``--image
CONTAINER=IMAGE`` (the canary's) and waits for its rollout (``--rollout-timeout``,
default replicas x the Deployment's progressDeadlineSeconds), then moves the
weights and deletes the canary; a rollout that does not finish is rolled back
(stable's previous images, the weights to stable, the canary deleted), so a
promotion never stops half-way. Each route patch is a JSON patch that first tests
the backendRef names at the given indexes, so a route that does not look as
expected is left alone.

Exit codes: 0 PROMOTE, 1 ROLLBACK, 2 nothing decided (bad arguments, Prometheus
unreachable or answering an error), 3 the action failed (manual action needed),
4 WAIT (not enough canary traffic yet: run it again later), 5 PROMOTE's rollout
did not finish and was rolled back (stable serves its previous version).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from devtools.promotion import KubernetesTarget, Promotion, PromotionError, PromotionRolledBack, planned_commands

EXIT_PROMOTE, EXIT_ROLLBACK, EXIT_ERROR, EXIT_ACTION_FAILED, EXIT_WAIT, EXIT_ROLLED_BACK = 0, 1, 2, 3, 4, 5
EXIT_CODES = {"PROMOTE": EXIT_PROMOTE, "ROLLBACK": EXIT_ROLLBACK, "WAIT": EXIT_WAIT}
TRACKS = ("stable", "canary")
PASS, FAIL, NOT_AVAILABLE, WAITING = "pass", "FAIL", "n/a", "wait"


class CanaryError(RuntimeError):
    """Nothing can be decided or applied; the message says why (exit 2, or 3 for a failed action)."""


# --------------------------------------------------------------------------- the decision (plain function)


@dataclass(frozen=True)
class TrackMetrics:
    """What Prometheus says about one track over the window."""

    succeeded: float = 0.0
    failed: float = 0.0
    p95_ms: float | None = None
    drift_p_values: dict[str, float] = field(default_factory=dict)  # "model/feature" -> p-value

    @property
    def requests(self) -> float:
        return self.succeeded + self.failed

    @property
    def error_rate(self) -> float | None:
        return self.failed / self.requests if self.requests > 0 else None


@dataclass(frozen=True)
class Thresholds:
    min_requests: int = 200
    max_error_rate_delta: float = 0.005  # canary error rate minus stable's, as a fraction (0.005 = 0.5 points)
    max_p95_ratio: float = 1.5
    drift_p_value: float = 0.01


@dataclass(frozen=True)
class Check:
    name: str
    stable: str
    canary: str
    limit: str
    outcome: str  # pass, FAIL, n/a, wait


@dataclass(frozen=True)
class Decision:
    verdict: str  # PROMOTE, ROLLBACK, WAIT
    checks: list[Check]
    reason: str

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}%"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} ms"


def decide(stable: TrackMetrics, canary: TrackMetrics, thresholds: Thresholds = Thresholds()) -> Decision:
    """PROMOTE, ROLLBACK or WAIT from the two tracks' numbers, with one row per check."""
    checks = [Check("requests", f"{stable.requests:.0f}", f"{canary.requests:.0f}", f">= {thresholds.min_requests} (canary)", PASS)]
    enough = canary.requests >= thresholds.min_requests
    if not enough:
        checks[0] = Check(checks[0].name, checks[0].stable, checks[0].canary, checks[0].limit, WAITING)

    # Error rate. Without stable traffic the canary is held to 0 + delta. Below min_requests the
    # canary's rate is bounded from below by failed / min_requests: if even that is over the limit,
    # more traffic cannot save it, so it is rolled back at once.
    stable_rate = stable.error_rate or 0.0
    limit = stable_rate + thresholds.max_error_rate_delta
    if canary.requests <= 0:
        error_outcome = WAITING
    elif enough:
        error_outcome = FAIL if (canary.error_rate or 0.0) > limit else PASS
    else:
        error_outcome = FAIL if canary.failed / thresholds.min_requests > limit else WAITING
    checks.append(
        Check(
            "error rate",
            _percent(stable.error_rate),
            _percent(canary.error_rate),
            f"<= stable + {_percent(thresholds.max_error_rate_delta)}",
            error_outcome,
        )
    )

    if stable.p95_ms is None or canary.p95_ms is None or stable.p95_ms <= 0:
        latency_outcome = NOT_AVAILABLE
    elif not enough:
        latency_outcome = WAITING
    else:
        latency_outcome = FAIL if canary.p95_ms > thresholds.max_p95_ratio * stable.p95_ms else PASS
    checks.append(
        Check("p95 latency", _ms(stable.p95_ms), _ms(canary.p95_ms), f"<= {thresholds.max_p95_ratio:g} x stable", latency_outcome)
    )

    if not canary.drift_p_values:
        checks.append(Check("drift", "n/a", "n/a", f"p >= {thresholds.drift_p_value:g}", NOT_AVAILABLE))
    for key in sorted(canary.drift_p_values):
        canary_p, stable_p = canary.drift_p_values[key], stable.drift_p_values.get(key)
        drifted = canary_p < thresholds.drift_p_value and not (stable_p is not None and stable_p < thresholds.drift_p_value)
        outcome = FAIL if drifted else (PASS if enough else WAITING)
        stable_text = "n/a" if stable_p is None else f"{stable_p:.3g}"
        checks.append(
            Check(f"drift {key}", stable_text, f"{canary_p:.3g}", f"p >= {thresholds.drift_p_value:g} unless stable drifts too", outcome)
        )

    failed = [check.name for check in checks if check.outcome == FAIL]
    if failed:
        return Decision("ROLLBACK", checks, f"failed: {', '.join(failed)}")
    if not enough:
        return Decision("WAIT", checks, f"the canary served {canary.requests:.0f} of the {thresholds.min_requests} requests needed")
    return Decision("PROMOTE", checks, "every check passed")


def format_table(decision: Decision) -> str:
    rows = [("check", "stable", "canary", "limit", "outcome")] + [(c.name, c.stable, c.canary, c.limit, c.outcome) for c in decision.checks]
    widths = [max(len(row[index]) for row in rows) for index in range(5)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    return "\n".join([*lines, f"verdict: {decision.verdict} ({decision.reason})"])


# --------------------------------------------------------------------------- Prometheus


def selector(pipeline: str, track_label: str, extra: str = "", model_label: str = "model") -> str:
    matchers = [f'{model_label}="{pipeline}"', f'{track_label}=~"{"|".join(TRACKS)}"']
    if extra:
        matchers.append(extra)
    return "{" + ",".join(matchers) + "}"


def queries(pipeline: str, track_label: str, window: str, extra: str = "") -> dict[str, str]:
    """The PromQL of each quantity, one series per track (and per drift feature)."""
    ensemble = selector(pipeline, track_label, extra)
    drift = selector(pipeline, track_label, extra, model_label="pipeline")
    return {
        "succeeded": f"sum by ({track_label}) (increase(nv_inference_request_success{ensemble}[{window}]))",
        "failed": f"sum by ({track_label}) (increase(nv_inference_request_failure{ensemble}[{window}]))",
        # A summary's quantiles cannot be averaged across pods: the slowest pod of each track stands for it.
        "p95_us": f'max by ({track_label}) (nv_inference_request_summary_us{ensemble[:-1]},quantile="0.95"}})',
        "drift_p_value": f"min by ({track_label}, model, feature) (vision_drift_p_value{drift})",
    }


def query_prometheus(base_url: str, promql: str, timeout_s: float = 10.0) -> list[dict]:
    """An instant query's result vector (``[{"metric": {...}, "value": [t, "v"]}, ...]``)."""
    url = f"{base_url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace")[:300]
        raise CanaryError(f"Prometheus at {base_url} answered HTTP {error.code} to {promql!r}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise CanaryError(f"cannot query Prometheus at {base_url}: {error}") from None
    if body.get("status") != "success":
        raise CanaryError(f"Prometheus refused {promql!r}: {body.get('error', body)}")
    return body["data"]["result"]


def _number(sample: dict) -> float | None:
    value = float(sample["value"][1])
    return None if math.isnan(value) or math.isinf(value) else value


def fetch(base_url: str, pipeline: str, track_label: str = "track", window: str = "5m", extra: str = "") -> dict[str, TrackMetrics]:
    """Both tracks' numbers from Prometheus; a quantity without series is 0 requests or not available."""
    found: dict[str, dict] = {track: {"succeeded": 0.0, "failed": 0.0, "p95_ms": None, "drift_p_values": {}} for track in TRACKS}
    for name, promql in queries(pipeline, track_label, window, extra).items():
        for sample in query_prometheus(base_url, promql):
            track, value = sample["metric"].get(track_label), _number(sample)
            if track not in found or value is None:
                continue
            if name == "p95_us":
                found[track]["p95_ms"] = value / 1000.0
            elif name == "drift_p_value":
                key = f"{sample['metric'].get('model', '?')}/{sample['metric'].get('feature', '?')}"
                found[track]["drift_p_values"][key] = value
            else:
                found[track][name] = value
    return {track: TrackMetrics(**values) for track, values in found.items()}


# --------------------------------------------------------------------------- actions


def apply_kubectl(verdict: str, target: KubernetesTarget, run: bool) -> list[str]:
    """Run the verdict (``run``) or print what it runs; a promotion's way back is printed beside its commands."""
    if run:
        promotion = Promotion(target)
        if verdict == "ROLLBACK":
            return promotion.rollback()
        return promotion.promote() if verdict == "PROMOTE" else []
    lines = [shlex.join(command) for command in planned_commands(verdict, target)]
    if verdict == "PROMOTE":
        names = " ".join(f"{image.split('=', 1)[0]}=<its image before>" for image in target.images)
        lines.append(
            f"# if that rollout does not finish: kubectl -n {target.namespace} set image deployment/{target.stable_deployment} "
            f"{names}, its rollout waited for, then the route patches and the delete above"
        )
    return lines


def apply_nginx(verdict: str, folder: Path, stable: str, canary: str) -> list[str]:
    """Rehearsal proxy: ROLLBACK takes the canary out, PROMOTE the stable backend; returns when no old worker is left."""
    from devtools.proxy import Backend, NginxProxy, ProxyError

    if verdict not in ("PROMOTE", "ROLLBACK"):
        return []
    try:
        proxy = NginxProxy.open(folder)
        removed = canary if verdict == "ROLLBACK" else stable
        kept = stable if verdict == "ROLLBACK" else canary
        if kept not in proxy.backends or removed not in proxy.backends:
            raise CanaryError(f"{folder}: backends are {sorted(proxy.backends)}, not {stable!r} and {canary!r}")
        proxy.backends[kept] = Backend(proxy.backends[kept].servers, max(1, proxy.backends[kept].weight))
        proxy.drain(removed)
    except ProxyError as error:
        raise CanaryError(str(error)) from None
    return [f"nginx {folder}: {removed} weight 0, {kept} serves every request"]


# --------------------------------------------------------------------------- command line


WINDOW = re.compile(r"^\d+(ms|s|m|h|d)$")


def _window(text: str) -> str:
    if not WINDOW.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Prometheus duration such as 30s, 5m, 1h")
    return text


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def _image(text: str) -> str:
    if "=" not in text or text.startswith("="):
        raise argparse.ArgumentTypeError(f"{text!r} is not CONTAINER=IMAGE")
    return text


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="canary",
        description=__doc__.split("\n\n")[0],
        epilog="exit codes: " + __doc__.split("Exit codes: ")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--prometheus", required=True, help="Prometheus base URL, e.g. http://localhost:9090")
    parser.add_argument("--pipeline", required=True, help="the pipeline (its ensemble is the model of that name)")
    parser.add_argument("--track-label", default="track", help="the label whose value is stable or canary (default: track)")
    parser.add_argument("--selector", default="", help='extra PromQL matchers for every series, e.g. namespace="vision-serving"')
    parser.add_argument("--window", type=_window, default="5m", help="the range compared (default: 5m)")
    defaults = Thresholds()
    parser.add_argument("--min-requests", type=int, default=defaults.min_requests, help="canary requests needed before PROMOTE")
    parser.add_argument("--max-error-rate-delta", type=_fraction, default=defaults.max_error_rate_delta, help="fraction, default 0.005")
    parser.add_argument("--max-p95-ratio", type=float, default=defaults.max_p95_ratio, help="canary p95 / stable p95, default 1.5")
    parser.add_argument("--drift-p-value", type=_fraction, default=defaults.drift_p_value, help="default 0.01")
    parser.add_argument("--apply", choices=("none", "nginx", "kubectl"), default="none", help="what to do with the verdict (default: none)")
    parser.add_argument("--yes", action="store_true", help="kubectl: run the commands instead of printing them")
    parser.add_argument("--json", action="store_true", help="print the decision as JSON")
    nginx = parser.add_argument_group("--apply nginx (the local rehearsal's proxy, devtools/proxy.py)")
    nginx.add_argument("--nginx-dir", type=Path, help="the proxy's folder (holds backends.json)")
    nginx.add_argument("--stable-backend", default="stable")
    nginx.add_argument("--canary-backend", default="canary")
    kube = parser.add_argument_group("--apply kubectl")
    target = KubernetesTarget()
    kube.add_argument("--namespace", default=target.namespace)
    kube.add_argument("--route", action="append", dest="routes", help=f"KIND/NAME, repeatable (default: {' '.join(target.routes)})")
    kube.add_argument("--rule-index", type=int, default=target.rule_index)
    kube.add_argument("--stable-service", default=target.stable_service, help="the stable backendRef's name")
    kube.add_argument("--canary-service", default=target.canary_service, help="the canary backendRef's name")
    kube.add_argument("--stable-ref-index", type=int, default=target.stable_ref_index)
    kube.add_argument("--canary-ref-index", type=int, default=target.canary_ref_index)
    kube.add_argument("--stable-deployment", default=target.stable_deployment)
    kube.add_argument("--canary-deployment", default=target.canary_deployment)
    kube.add_argument("--image", action="append", type=_image, default=[], help="CONTAINER=IMAGE set on the stable Deployment on PROMOTE")
    kube.add_argument(
        "--rollout-timeout",
        type=int,
        metavar="SECONDS",
        help="how long PROMOTE waits for stable's rollout before rolling it back (default: replicas x its progressDeadlineSeconds)",
    )
    args = parser.parse_args(argv)
    if args.apply == "nginx" and args.nginx_dir is None:
        parser.error("--apply nginx needs --nginx-dir")
    if args.min_requests < 1 or args.max_p95_ratio <= 0:
        parser.error("--min-requests must be >= 1 and --max-p95-ratio > 0")
    return args


def kubernetes_target(args: argparse.Namespace) -> KubernetesTarget:
    """The objects ``--apply kubectl`` acts on, from the command line."""
    return KubernetesTarget(
        args.namespace,
        tuple(args.routes or KubernetesTarget().routes),
        args.rule_index,
        args.stable_service,
        args.canary_service,
        args.stable_ref_index,
        args.canary_ref_index,
        args.stable_deployment,
        args.canary_deployment,
        tuple(args.image),
        args.rollout_timeout,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    thresholds = Thresholds(args.min_requests, args.max_error_rate_delta, args.max_p95_ratio, args.drift_p_value)
    try:
        tracks = fetch(args.prometheus, args.pipeline, args.track_label, args.window, args.selector)
    except CanaryError as error:
        print(f"canary: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    decision = decide(tracks["stable"], tracks["canary"], thresholds)
    actions: list[str] = []
    code = decision.exit_code
    applying = time.monotonic()
    try:
        if args.apply == "nginx":
            actions = apply_nginx(decision.verdict, args.nginx_dir, args.stable_backend, args.canary_backend)
        elif args.apply == "kubectl":
            actions = apply_kubectl(decision.verdict, kubernetes_target(args), run=args.yes)
    except PromotionRolledBack as error:
        print(f"canary: error: PROMOTE rolled back: {error}", file=sys.stderr)
        actions, code = error.lines, EXIT_ROLLED_BACK
    except PromotionError as error:
        print(f"canary: error: {decision.verdict} not applied: {error}", file=sys.stderr)
        actions = error.lines
        code = EXIT_ERROR if not args.yes else EXIT_ACTION_FAILED
    except CanaryError as error:
        print(f"canary: error: {decision.verdict} not applied: {error}", file=sys.stderr)
        code = EXIT_ERROR if not args.yes and args.apply == "kubectl" else EXIT_ACTION_FAILED
    apply_seconds = round(time.monotonic() - applying, 2)
    if args.json:
        report = {
            "pipeline": args.pipeline,
            "window": args.window,
            "verdict": decision.verdict,
            "reason": decision.reason,
            "tracks": {
                track: asdict(metrics) | {"requests": metrics.requests, "error_rate": metrics.error_rate}
                for track, metrics in tracks.items()
            },
            "checks": [asdict(check) for check in decision.checks],
            "actions": actions,
            "apply_seconds": apply_seconds,
            "applied": args.apply != "none" and (args.apply != "kubectl" or args.yes) and code == decision.exit_code,
        }
        print(json.dumps(report, indent=2))
    else:
        print(format_table(decision))
        if actions and args.apply == "kubectl" and not args.yes:
            print("# not run (--yes runs them):")
        for line in actions:
            print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
