"""How long a new pod takes to serve, and the rollout's deadlines derived from it.

**The plans' build time, estimated from the engine sizes** (``benchmarks/results/gpu_memory.json``: every model a pod
serves from a plan, its weights and each optimization profile's activations at its largest shape)::

    plan seconds = PLAN_SECONDS + sum over its profiles of
                   (PROFILE_SECONDS + SECONDS_PER_WEIGHT_MIB x weights MiB + SECONDS_PER_ACTIVATION_GIB x activations GiB)

TensorRT's builder times each layer's candidate tactics, once per optimization profile and at that profile's shapes:
the time grows with the profiles, with the layers (their weights stand for them here) and with the tensors it times
(the activations). The coefficients are an assumption, not a measurement (no GPU was lent here): they put one-profile
builds of EfficientNet-Lite4 (50 MiB of FP32 weights) and YOLOv4 (245 MiB) at about 1.7 times the 34.6 s and 108.6 s
onnxruntime's maintainers published for its TensorRT execution provider without a timing cache. Every plan records
its own build time (``model.plan.json``, ``seconds``): the first GPU run replaces these numbers with measured ones.

**A pod's start** on a node that has no plan for its GPU and TensorRT (no shared cache, or a new node type): pull the
images and copy the models (``PULL_SECONDS``: the server and builder images are several GB each on a node that has
never pulled them), build every plan in turn (one GPU), verify each, then start Triton (``TRITON_START_SECONDS``: every
Python step's instances) and warm every profile up (``WARMUP_SECONDS_PER_PROFILE``: ``model_warmup`` runs each at
its opt and its max shape). A pod that finds its plans in the shared cache copies them instead of building.

**What Kubernetes is told** (``SAFETY`` times the estimate, rounded up):

- ``progressDeadlineSeconds``: a rolling update makes progress each time a new pod becomes available, so the deadline
  bounds one pod's cold start (init containers have no probes of their own: this is what bounds the build);
- the ``build-plan`` init container's ``timeout``: the builds alone, so a hung build fails the pod in one line;
- the startupProbe of the Triton container: Triton's start and the warm-up (it starts after the init containers);
- a promotion's ``rollout status --timeout``: replicas x ``progressDeadlineSeconds`` (pods roll one at a time).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PLAN_SECONDS = 20.0  # builder and CUDA context, parsing, serializing and writing one plan, verify-plan --deserialize
PROFILE_SECONDS = 15.0
SECONDS_PER_WEIGHT_MIB = 0.5
SECONDS_PER_ACTIVATION_GIB = 30.0
PULL_SECONDS = 600.0  # two images of several GB on a node that has neither; seconds when it has them
COPY_SECONDS = 30.0  # the model image's repository into the pod, or every cached plan out of the shared cache
VERIFY_SECONDS_PER_PLAN = 5.0  # verify-plan --deserialize of a plan copied from the cache (a built one's is in PLAN_SECONDS)
TRITON_START_SECONDS = 120.0
WARMUP_SECONDS_PER_PROFILE = 5.0
SAFETY = 1.5
STARTUP_PERIOD_SECONDS = 10  # the startupProbe's periodSeconds


@dataclass(frozen=True)
class PlanEstimate:
    model: str
    profiles: int
    weights_mib: float
    activations_gib: float
    build_seconds: float


@dataclass(frozen=True)
class PodStart:
    """One pod's start, in seconds, and the Kubernetes settings derived from it."""

    plans: tuple[PlanEstimate, ...]

    @property
    def build_seconds(self) -> float:
        return sum(plan.build_seconds for plan in self.plans)

    @property
    def startup_seconds(self) -> float:
        """Triton's start and every profile's warm-up: what the startupProbe waits for."""
        return TRITON_START_SECONDS + WARMUP_SECONDS_PER_PROFILE * sum(plan.profiles for plan in self.plans)

    def cold_seconds(self) -> float:
        """A pod on a node with no plan for its GPU and TensorRT: pull, copy, build every plan, start."""
        return PULL_SECONDS + COPY_SECONDS + self.build_seconds + self.startup_seconds

    def cached_seconds(self) -> float:
        """A pod whose plans are in the shared cache: pull, copy the models and the plans, start."""
        return PULL_SECONDS + 2 * COPY_SECONDS + VERIFY_SECONDS_PER_PLAN * len(self.plans) + self.startup_seconds

    @property
    def progress_deadline_seconds(self) -> int:
        return _round_up(SAFETY * self.cold_seconds(), 60)

    @property
    def build_timeout_seconds(self) -> int:
        return _round_up(SAFETY * self.build_seconds, 60)

    @property
    def startup_failure_threshold(self) -> int:
        return math.ceil(SAFETY * self.startup_seconds / STARTUP_PERIOD_SECONDS)

    def rollout_timeout_seconds(self, replicas: int) -> int:
        return replicas * self.progress_deadline_seconds


def plan_seconds(weights_bytes: int, activations_bytes: Sequence[int]) -> float:
    """One plan's estimated build time: its weights and each of its profiles' activations at their largest shapes."""
    weights_mib = weights_bytes / 2**20
    per_profile = (
        PROFILE_SECONDS + SECONDS_PER_WEIGHT_MIB * weights_mib + SECONDS_PER_ACTIVATION_GIB * a / 2**30 for a in activations_bytes
    )
    return PLAN_SECONDS + sum(per_profile)


def estimate(models: Iterable[Mapping[str, Any]]) -> PodStart:
    """The start of a pod serving these models (``gpu_memory.json``'s ``models``: each one's weights and profiles)."""
    plans = []
    for model in models:
        activations = [int(profile["activations_bytes"]) for profile in model["profiles"]]
        plans.append(
            PlanEstimate(
                str(model["model"]),
                len(activations),
                round(int(model["weights_bytes"]) / 2**20, 2),
                round(sum(activations) / 2**30, 3),
                round(plan_seconds(int(model["weights_bytes"]), activations), 1),
            )
        )
    return PodStart(tuple(plans))


def _round_up(seconds: float, step: int) -> int:
    return int(math.ceil(seconds / step) * step)
