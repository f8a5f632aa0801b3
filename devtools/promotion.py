"""The canary's verdict applied with kubectl: a promotion finishes or is rolled back, never left half-way.

ROLLBACK: each route's weights to stable 100 / canary 0 (a JSON patch that first tests the backendRefs' names at the
given indexes, so a route that does not look as expected is left alone), then the canary Deployment deleted.

PROMOTE, as one transaction:

1. read the stable Deployment: the images of the containers to promote (init containers included: the model image
   is one), its replicas and its ``progressDeadlineSeconds``;
2. set the canary's images on it and wait for its rollout: ``kubectl rollout status`` ends with an error as soon as the
   Deployment exceeds its progress deadline on any pod (kubectl's rollout status reads the Progressing condition's
   ``ProgressDeadlineExceeded``), and its ``--timeout`` bounds the whole rollout at replicas x that deadline (pods
   roll one at a time: maxSurge 1, maxUnavailable 0);
3. finished: the routes to 100/0 and the canary deleted (stable now serves the promoted version);
4. not finished: stable's images set back to those read in 1, that rollout waited for the same way, then the routes to
   100/0 and the canary deleted, and :class:`PromotionRolledBack` raised (the command exits 5). Should the way back fail
   too, :class:`~devtools.canary.CanaryError` says what state is left (exit 3: manual action needed).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Run = Callable[[list[str]], subprocess.CompletedProcess[str]]


class PromotionError(RuntimeError):
    """A kubectl step failed where nothing can be undone automatically (exit 3: manual action needed); ``lines``: what ran."""

    def __init__(self, message: str, lines: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.lines = list(lines)


class PromotionRolledBack(PromotionError):
    """The promotion did not finish and was rolled back: stable serves its previous version, the canary is gone (exit 5)."""


@dataclass(frozen=True)
class KubernetesTarget:
    namespace: str = "vision-serving"
    routes: tuple[str, ...] = ("grpcroute/vision-serving", "httproute/vision-serving")
    rule_index: int = 0
    stable_service: str = "vision-serving"
    canary_service: str = "vision-serving-canary"
    stable_ref_index: int = 0
    canary_ref_index: int = 1
    stable_deployment: str = "vision-serving"
    canary_deployment: str = "vision-serving-canary"
    images: tuple[str, ...] = ()  # CONTAINER=IMAGE for the stable Deployment on promotion
    rollout_timeout_s: int | None = None  # None: replicas x progressDeadlineSeconds of the stable Deployment


def route_patch(target: KubernetesTarget, stable_weight: int, canary_weight: int) -> list[dict]:
    """A JSON patch that checks both backendRefs' names, then sets their weights."""
    refs = f"/spec/rules/{target.rule_index}/backendRefs"
    return [
        {"op": "test", "path": f"{refs}/{target.stable_ref_index}/name", "value": target.stable_service},
        {"op": "test", "path": f"{refs}/{target.canary_ref_index}/name", "value": target.canary_service},
        {"op": "replace", "path": f"{refs}/{target.stable_ref_index}/weight", "value": stable_weight},
        {"op": "replace", "path": f"{refs}/{target.canary_ref_index}/weight", "value": canary_weight},
    ]


def _kubectl(target: KubernetesTarget, *arguments: str) -> list[str]:
    return ["kubectl", "-n", target.namespace, *arguments]


def stable_only(target: KubernetesTarget) -> list[list[str]]:
    """Every route to stable 100 / canary 0, then the canary deleted: how both outcomes end."""
    patch = json.dumps(route_patch(target, 100, 0), separators=(",", ":"))
    commands = [_kubectl(target, "patch", route, "--type=json", "-p", patch) for route in target.routes]
    return [*commands, _kubectl(target, "delete", f"deployment/{target.canary_deployment}", "--ignore-not-found")]


def set_images(target: KubernetesTarget, images: Sequence[str]) -> list[str]:
    return _kubectl(target, "set", "image", f"deployment/{target.stable_deployment}", *images)


def rollout_status(target: KubernetesTarget, timeout_s: int | None) -> list[str]:
    timeout = [] if timeout_s is None else [f"--timeout={timeout_s}s"]
    return _kubectl(target, "rollout", "status", f"deployment/{target.stable_deployment}", *timeout)


def planned_commands(verdict: str, target: KubernetesTarget) -> list[list[str]]:
    """What ``verdict`` runs when everything succeeds (none for WAIT); a promotion's way back is printed beside it."""
    if verdict == "ROLLBACK":
        return stable_only(target)
    if verdict != "PROMOTE":
        return []
    if not target.images:
        raise PromotionError("--apply kubectl promotes with --image CONTAINER=IMAGE (the canary's images, for the stable Deployment)")
    read = _kubectl(target, "get", f"deployment/{target.stable_deployment}", "-o", "json")
    return [read, set_images(target, target.images), rollout_status(target, target.rollout_timeout_s), *stable_only(target)]


@dataclass(frozen=True)
class StableState:
    """What the stable Deployment runs before a promotion."""

    images: dict[str, str]  # container (and init container) name -> image
    replicas: int
    progress_deadline_s: int

    @classmethod
    def from_json(cls, text: str) -> StableState:
        deployment = json.loads(text)
        spec = deployment["spec"]
        pod = spec["template"]["spec"]
        containers = [*pod.get("initContainers", []), *pod.get("containers", [])]
        # Kubernetes' defaults when a field is not set: 1 replica, a 600 s progress deadline.
        return cls({c["name"]: c["image"] for c in containers}, int(spec.get("replicas", 1)), int(spec.get("progressDeadlineSeconds", 600)))


class Promotion:
    """Applies a verdict with kubectl (``run`` executes one command)."""

    def __init__(self, target: KubernetesTarget, run: Run | None = None) -> None:
        self.target = target
        self.run_command = run or (lambda command: subprocess.run(command, capture_output=True, text=True, check=False))
        self.lines: list[str] = []

    def _run(self, command: list[str]) -> subprocess.CompletedProcess[str]:
        self.lines.append(shlex.join(command))
        return self.run_command(command)

    def _must(self, command: list[str], state: str) -> subprocess.CompletedProcess[str]:
        result = self._run(command)
        if result.returncode != 0:
            raise PromotionError(f"{shlex.join(command)} failed ({result.returncode}): {_said(result)}; {state}", self.lines)
        return result

    def rollback(self) -> list[str]:
        for command in stable_only(self.target):
            self._must(command, "the canary still takes its share of the traffic: finish by hand")
        return self.lines

    def promote(self) -> list[str]:
        target = self.target
        if not target.images:
            raise PromotionError("--apply kubectl promotes with --image CONTAINER=IMAGE (the canary's images, for the stable Deployment)")
        read = self._must(_kubectl(target, "get", f"deployment/{target.stable_deployment}", "-o", "json"), "nothing was changed")
        before = StableState.from_json(read.stdout)
        unknown = sorted({image.split("=", 1)[0] for image in target.images} - set(before.images))
        if unknown:
            raise PromotionError(
                f"deployment/{target.stable_deployment} has no container {', '.join(unknown)}; nothing was changed", self.lines
            )
        timeout = target.rollout_timeout_s or before.replicas * before.progress_deadline_s
        self._must(set_images(target, target.images), "nothing was changed")
        waited = self._run(rollout_status(target, timeout))
        if waited.returncode == 0:
            for command in stable_only(target):
                self._must(command, f"deployment/{target.stable_deployment} runs the promoted images; finish the route change by hand")
            return self.lines
        previous = [f"{name}={before.images[name]}" for name in (image.split("=", 1)[0] for image in target.images)]
        undo = f"deployment/{target.stable_deployment} is half-updated: set {' '.join(previous)} by hand"
        self._must(set_images(target, previous), undo)
        self._must(rollout_status(target, timeout), undo)
        for command in stable_only(target):
            self._must(command, "stable runs its previous images again; finish the route change by hand")
        raise PromotionRolledBack(
            f"the promotion's rollout did not finish ({_said(waited)}): deployment/{target.stable_deployment} is back to "
            f"{' '.join(previous)}, the canary is deleted and stable serves every request",
            self.lines,
        )


def _said(result: subprocess.CompletedProcess[str]) -> str:
    return (result.stderr or result.stdout or "").strip() or f"exit {result.returncode}"
