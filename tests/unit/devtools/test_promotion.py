"""devtools.promotion: a canary's verdict applied with kubectl; a promotion finishes or rolls back (kubectl stood in for)."""

from __future__ import annotations

import json
import subprocess

import pytest

from devtools import canary, promotion
from devtools.promotion import KubernetesTarget, Promotion, PromotionError, PromotionRolledBack

STABLE = {
    "spec": {
        "replicas": 2,
        "progressDeadlineSeconds": 1800,
        "template": {
            "spec": {
                "initContainers": [
                    {"name": "models", "image": "registry/models:v1"},
                    {"name": "build-plan", "image": "registry/builder:1"},
                ],
                "containers": [{"name": "triton", "image": "registry/server:1"}],
            }
        },
    }
}
PROMOTED = ("models=registry/models:v2", "triton=registry/server:2")


class Kubectl:
    """Answers kubectl as a cluster would: the stable Deployment's JSON; ``rollout status`` fails the first ``failures``
    times as kubectl does when the Deployment exceeds its progress deadline."""

    def __init__(self, failures: int = 0, failing: str = "") -> None:
        self.commands: list[list[str]] = []
        self.failures, self.failing = failures, failing

    def __call__(self, command: list[str]) -> subprocess.CompletedProcess[str]:
        self.commands.append(command)
        if command[3:5] == ["get", "deployment/vision-serving"]:
            return subprocess.CompletedProcess(command, 0, json.dumps(STABLE), "")
        if command[3:5] == ["rollout", "status"] and self.failures:
            self.failures -= 1
            return subprocess.CompletedProcess(command, 1, "", 'error: deployment "vision-serving" exceeded its progress deadline')
        if self.failing and self.failing in " ".join(command):
            return subprocess.CompletedProcess(command, 1, "", "Error from server (Forbidden)")
        return subprocess.CompletedProcess(command, 0, "", "")

    def verbs(self) -> list[str]:
        return [" ".join(command[3:5]) for command in self.commands]


def test_rollback_patches_every_route_after_testing_the_backend_names_then_deletes_the_canary():
    target = KubernetesTarget(namespace="ns", routes=("grpcroute/r", "httproute/r"), stable_service="s", canary_service="c")
    commands = promotion.stable_only(target)
    assert [command[:6] for command in commands[:2]] == [
        ["kubectl", "-n", "ns", "patch", "grpcroute/r", "--type=json"],
        ["kubectl", "-n", "ns", "patch", "httproute/r", "--type=json"],
    ]
    assert json.loads(commands[0][-1]) == [
        {"op": "test", "path": "/spec/rules/0/backendRefs/0/name", "value": "s"},
        {"op": "test", "path": "/spec/rules/0/backendRefs/1/name", "value": "c"},
        {"op": "replace", "path": "/spec/rules/0/backendRefs/0/weight", "value": 100},
        {"op": "replace", "path": "/spec/rules/0/backendRefs/1/weight", "value": 0},
    ]
    assert commands[-1] == ["kubectl", "-n", "ns", "delete", "deployment/vision-serving-canary", "--ignore-not-found"]
    assert promotion.planned_commands("ROLLBACK", target) == commands and promotion.planned_commands("WAIT", target) == []
    kubectl = Kubectl()
    Promotion(target, kubectl).rollback()
    assert kubectl.commands == commands


def test_a_promotion_that_finishes_waits_replicas_times_the_progress_deadline_then_moves_the_routes():
    kubectl = Kubectl()
    lines = Promotion(KubernetesTarget(images=PROMOTED), kubectl).promote()
    assert kubectl.verbs() == [
        "get deployment/vision-serving",
        "set image",
        "rollout status",
        "patch grpcroute/vision-serving",
        "patch httproute/vision-serving",
        "delete deployment/vision-serving-canary",
    ]
    assert kubectl.commands[1][-2:] == list(PROMOTED)
    assert kubectl.commands[2][-1] == "--timeout=3600s"  # 2 replicas x 1800 s, one pod at a time
    assert len(lines) == 6
    kubectl = Kubectl()
    Promotion(KubernetesTarget(images=PROMOTED, rollout_timeout_s=900), kubectl).promote()
    assert kubectl.commands[2][-1] == "--timeout=900s"


def test_a_promotion_whose_rollout_times_out_is_rolled_back_not_left_half_way():
    """The rollout stops at the progress deadline (a plan build that outran it): stable gets its previous images back,
    that rollout is waited for, the routes go to stable and the canary is deleted; nothing is left half-way."""
    kubectl = Kubectl(failures=1)
    with pytest.raises(PromotionRolledBack) as rolled_back:
        Promotion(KubernetesTarget(images=PROMOTED), kubectl).promote()
    assert kubectl.verbs() == [
        "get deployment/vision-serving",
        "set image",
        "rollout status",
        "set image",
        "rollout status",
        "patch grpcroute/vision-serving",
        "patch httproute/vision-serving",
        "delete deployment/vision-serving-canary",
    ]
    assert kubectl.commands[3][-2:] == ["models=registry/models:v1", "triton=registry/server:1"]  # exactly what it ran before
    assert "exceeded its progress deadline" in str(rolled_back.value) and "models=registry/models:v1" in str(rolled_back.value)


def test_when_the_way_back_fails_too_the_state_left_is_said():
    kubectl = Kubectl(failures=2)
    with pytest.raises(PromotionError, match=r"is half-updated: set models=registry/models:v1 triton=registry/server:1 by hand"):
        Promotion(KubernetesTarget(images=PROMOTED), kubectl).promote()
    with pytest.raises(PromotionError, match="has no container tritonserver; nothing was changed"):
        Promotion(KubernetesTarget(images=("tritonserver=x:1",)), Kubectl()).promote()
    with pytest.raises(PromotionError, match="finish the route change by hand"):
        Promotion(KubernetesTarget(images=PROMOTED), Kubectl(failing="patch httproute")).promote()
    with pytest.raises(PromotionError, match="--image"):
        Promotion(KubernetesTarget(), Kubectl()).promote()


def test_the_command_exits_5_when_a_promotion_rolls_back(monkeypatch, capsys):
    """python -m devtools.canary --apply kubectl --yes, end to end: a healthy canary, a rollout that times out."""
    healthy = {"stable": canary.TrackMetrics(9000, 9, 40.0), "canary": canary.TrackMetrics(1000, 1, 41.0)}
    monkeypatch.setattr(canary, "fetch", lambda *args, **kwargs: healthy)
    kubectl = Kubectl(failures=1)
    monkeypatch.setattr(promotion.subprocess, "run", lambda command, **kwargs: kubectl(command))
    argv = ["--prometheus", "http://prometheus:9090", "--pipeline", "image_classifier", "--apply", "kubectl", "--yes"]
    code = canary.main([*argv, "--image", PROMOTED[0], "--image", PROMOTED[1]])
    out, err = capsys.readouterr()
    assert code == canary.EXIT_ROLLED_BACK == 5
    assert err.startswith("canary: error: PROMOTE rolled back: the promotion's rollout did not finish") and err.count("\n") == 1
    assert "verdict: PROMOTE" in out and out.count("kubectl -n vision-serving") == 8
