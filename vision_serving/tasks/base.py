"""What every task provides (:class:`Task`), and what tasks share: tensors found by role, results, gate checks.

A postprocess model's tensors are found by **role** (:class:`Role`: datatype, per-image dims,
required or optional, and a conventional name that settles ties), never by literal names,
so renaming a tensor is a config change only. A :class:`Postprocessor` (one per loaded
config) validates one request's inputs (:meth:`Postprocessor.parse`) and computes a whole
batch at once (:meth:`Postprocessor.run`); its :class:`TaskResult` gives the outputs of any
range of images (one response each) and the batch's drift features.
"""

from __future__ import annotations

import dataclasses
import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .. import drift, image_codec, model_config, preprocessing
from ..model_config import ConfigError, ModelConfig

# --------------------------------------------------------------------------- tensors by role


@dataclass(frozen=True)
class Role:
    """One tensor a model reads or writes, described by what it is.

    ``dims`` are per image (no batch dim); ``None`` at a position matches any size, and
    ``dims=None`` any rank. ``optional``: an input the config declares ``optional: true`` (a
    request may leave it out), or an output the config may leave out. ``name``: the
    conventional name, which picks one of several tensors that fit. ``from_core``: an input
    holding a core output (refused when it holds NaN or Inf).
    """

    role: str
    datatype: str  # the KServe spelling: FP32, INT32, BYTES
    dims: tuple[int | None, ...] | None = None
    optional: bool = False
    name: str = ""
    from_core: bool = False

    def fits(self, tensor: Any, kind: str) -> bool:
        if model_config.dtype_name(tensor.data_type) != self.datatype:
            return False
        dims = [int(d) for d in tensor.dims]
        if self.dims is not None and (len(dims) != len(self.dims) or any(w is not None and w != d for w, d in zip(self.dims, dims))):
            return False
        return kind == "output" or bool(getattr(tensor, "optional", False)) == self.optional

    def describe(self) -> str:
        dims = "any shape" if self.dims is None else "[" + ", ".join("*" if d is None else str(d) for d in self.dims) + "]"
        return f"{'optional ' if self.optional else ''}{self.datatype} {dims} ({self.role})"


def resolve_roles(config: ModelConfig, kind: str, roles: Sequence[Role]) -> dict[str, str | None]:
    """Role -> tensor name (None: an optional role the config leaves out), in ``roles`` order.

    Every tensor of ``kind`` must fill exactly one role; raises ``ConfigError`` naming the model,
    the role and what was found."""
    tensors = list(config.input if kind == "input" else config.output)
    taken: set[str] = set()
    found: dict[str, str | None] = {}
    for role in roles:
        candidates = [t.name for t in tensors if t.name not in taken and role.fits(t, kind)]
        if len(candidates) > 1 and role.name in candidates:
            candidates = [role.name]
        if len(candidates) > 1:
            raise ConfigError(f"model '{config.name}': {kind}s {candidates} all fit {role.describe()}; name one '{role.name}'")
        if not candidates and not role.optional:
            present = ", ".join(f"{t.name} {model_config.dtype_name(t.data_type)} {list(t.dims)}" for t in tensors) or "none"
            raise ConfigError(f"model '{config.name}': no {kind} is {role.describe()}; its {kind}s: {present}")
        found[role.role] = candidates[0] if candidates else None
        taken.update(candidates[:1])
    extra = [t.name for t in tensors if t.name not in taken]
    if extra:
        expected = "; ".join(role.describe() for role in roles)
        raise ConfigError(f"model '{config.name}': {kind}(s) {extra} fill no role; expected {expected}")
    return found


# --------------------------------------------------------------------------- results and postprocessors


class TaskResult(ABC):
    """A batch's answers: outputs for any range of its images, and its drift features."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def outputs(self, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        """Output tensors (by the config's names) of images ``start:stop``, as one response."""

    @abstractmethod
    def features(self) -> drift.Features:
        """The batch's drift features (the task's ``drift_features``), one value per image."""

    def split(self, counts: Sequence[int]) -> list[dict[str, np.ndarray]]:
        """One response per request, ``counts[i]`` images each, in order."""
        starts = np.cumsum([0, *counts]).tolist()
        return [self.outputs(start, stop) for start, stop in itertools.pairwise(starts)]


class Postprocessor(ABC):
    """A postprocess model's computation, from its config: parse one request, run a batch."""

    def __init__(self, config: ModelConfig, input_roles: Sequence[Role], output_roles: Sequence[Role]) -> None:
        self.config = config
        self.input_roles = {role.role: role for role in input_roles}
        self.inputs = resolve_roles(config, "input", input_roles)
        self.outputs = resolve_roles(config, "output", output_roles)
        # Second-stage models this postprocess calls (role -> a model of the same repository): none unless
        # its task reads several models (BLS when served; the in-process pipeline connects their CPU cores).
        self.stage_models: dict[str, str] = {}
        # Each second stage's input and the outputs this postprocess reads from it, in order (role -> (input, outputs)).
        self.stage_tensors: dict[str, tuple[str, tuple[str, ...]]] = {}
        # Each second stage's input datatype where it is not FP32 (role -> numpy dtype).
        self.stage_dtypes: dict[str, type] = {}

    def use_stages(self, models: Mapping[str, Any]) -> None:
        """The second-stage models to call (role -> an async call: a batch in, the model's outputs out)."""
        if models:
            raise ConfigError(f"model '{self.config.name}' calls no second-stage model, got {', '.join(models)}")

    @property
    def input_names(self) -> list[str]:
        return [name for name in self.inputs.values() if name is not None]

    def named(self, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Output arrays by role -> by the config's tensor names (roles the config leaves out are dropped)."""
        return {name: values[role] for role, name in self.outputs.items() if name is not None}

    @property
    def core_input_names(self) -> list[str]:
        """The inputs holding core outputs (checked for NaN/Inf per request)."""
        return [name for role, name in self.inputs.items() if name is not None and self.input_roles[role].from_core]

    def parse(self, named: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
        """One request's inputs (by tensor name; an optional one may be absent or None) -> per-image
        arrays by role, options validated and defaulted. Raises ``ValueError`` for the client's mistakes."""
        values: dict[str, np.ndarray | None] = {}
        for role, name in self.inputs.items():
            value = named.get(name) if name is not None else None
            if value is None and not self.input_roles[role].optional:
                raise ValueError(f"missing input '{name}'")
            values[role] = None if value is None else np.asarray(value)
        return self.parse_roles(values)

    @abstractmethod
    def parse_roles(self, values: Mapping[str, np.ndarray | None]) -> dict[str, np.ndarray]:
        """Inputs by role (None: an optional input left out) -> per-image arrays by role."""

    @staticmethod
    def concatenate(parsed: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Several parsed requests -> one batch (their images in order)."""
        if len(parsed) == 1:
            return dict(parsed[0])
        return {role: np.concatenate([item[role] for item in parsed]) for role in parsed[0]}

    @abstractmethod
    def run(self, batch: Mapping[str, np.ndarray]) -> TaskResult:
        """A parsed batch (by role) -> its results, as one vectorized computation."""

    async def read(self, batch: Mapping[str, np.ndarray]) -> TaskResult:
        """:meth:`run` for a postprocess that awaits its second stages (the served model awaits this one when
        :attr:`stage_models` names any)."""
        return self.run(batch)


def per_image_option(values: np.ndarray | None, count: int, default: float, name: str, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    """An optional per-image request input ``[count, 1]`` -> float32 ``[count]`` (the default when
    absent); ``ValueError`` unless every value is a number in [low, high]."""
    if values is None:
        return np.full((count,), default, dtype=np.float32)
    flat = np.asarray(values, dtype=np.float32).reshape(-1)
    if flat.shape != (count,):
        raise ValueError(f"{name} must have one value per image ({count}), got {flat.size}")
    bad = flat[~((flat >= low) & (flat <= high))]  # NaN is bad too
    if bad.size:
        raise ValueError(f"{name} must be in [{low:g}, {high:g}], got {bad[0]}")
    return flat


def rows(values: np.ndarray) -> int:
    """The number of images in a per-image array."""
    return int(np.asarray(values).shape[0])


# --------------------------------------------------------------------------- gates


def gate_report(metrics: dict[str, Any], checks: Mapping[str, tuple[float, float]]) -> dict[str, Any]:
    """The gate's record: every metric, and each check's value, minimum and verdict."""
    return {
        "metrics": metrics,
        "checks": {
            name: {"value": float(value), "min": minimum, "pass": bool(value >= minimum)} for name, (value, minimum) in checks.items()
        },
    }


def thresholds(defaults: Mapping[str, float], given: Mapping[str, Any], where: str) -> dict[str, float]:
    """A recipe's ``[gate]`` table over the task's defaults; unknown keys and non-numbers are ``ValueError``."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; this task's gate has {', '.join(sorted(defaults))}")
    merged = dict(defaults)
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}: {key} must be a number, got {value!r}")
        merged[key] = float(value)
    return merged


# --------------------------------------------------------------------------- TensorRT profiles


@dataclass(frozen=True)
class EngineProfile:
    """One TensorRT optimization profile of a model whose one input has dynamic dims, as the code that makes that
    input bounds it (a preprocess, or a task's second-stage crops): per-image dims (no batch) from ``min`` to
    ``max``, tuned for ``opt`` at batch ``opt_batch``; the batch runs from 1 to the model's ``max_batch_size``."""

    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]
    opt_batch: int = 1

    def __post_init__(self) -> None:
        if not (len(self.min) == len(self.opt) == len(self.max)) or not all(
            0 < lo <= mid <= hi for lo, mid, hi in zip(self.min, self.opt, self.max)
        ):
            raise ValueError(f"profile {self.name!r}: need 0 < min <= opt <= max dim by dim, got {self.min}, {self.opt}, {self.max}")
        if self.opt_batch < 1:
            raise ValueError(f"profile {self.name!r}: opt_batch must be at least 1, got {self.opt_batch}")

    def fits(self, dims: Sequence[int]) -> bool:
        """Whether per-image ``dims`` lie within this profile."""
        return len(dims) == len(self.max) and all(lo <= d <= hi for d, lo, hi in zip(dims, self.min, self.max))


# --------------------------------------------------------------------------- the task


@dataclass(frozen=True)
class LabelledSample:
    """One image of a user's labelled dataset and what it should give (the task's own kind of target)."""

    path: Path
    target: Any


@dataclass(frozen=True)
class Preprocessor:
    """A preprocess computation of a task's own, named by a preprocess config's ``preprocessor`` parameter
    (:mod:`vision_serving.preprocessors`): what it computes, checks and implies for the core it feeds."""

    name: str
    # The computation for a config: decoded photos -> its outputs by name (each photo's shape its own).
    make: Callable[[ModelConfig], preprocessing.Preprocess]
    # The config's problems (the outputs it declares against those the computation writes).
    check: Callable[[ModelConfig], list[str]]
    # The TensorRT profiles of the core it feeds: the shapes it can send.
    profiles: Callable[[ModelConfig], tuple[EngineProfile, ...]]
    # The normalization the core computes in its graph from the uint8 pixels it is handed.
    normalization: Callable[[ModelConfig], preprocessing.PixelNormalization]
    # The output through which it hands the core its input.
    pixels: str = "PIXELS"
    # The config parameters of its own (besides every preprocess's decode limits, threads, sizing and drift).
    parameters: tuple[str, ...] = ()
    # The parameters of its own a config states where its spec does not say.
    defaults: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # One request's computation, as the served preprocess runs it (its outputs stacked; ``ValueError`` when its
    # photos' outputs cannot share one shape); None: ``make``'s.
    request: Callable[[ModelConfig], preprocessing.Preprocess] | None = None
    # The request's optional inputs it reads besides the upload (by role), and how a request is then decoded and
    # computed: ``planner(config)`` -> (those inputs by role, None where not sent; the count of photos) -> a plan.
    options: tuple[Role, ...] = ()
    planner: Callable[[ModelConfig], Callable[[Mapping[str, np.ndarray | None], int], RequestPlan]] | None = None


@dataclass(frozen=True)
class RequestPlan:
    """How one request's photos are decoded (each at its own smallest size, None: in full) and computed, given its
    optional inputs (a preprocessor that reads them: :attr:`Preprocessor.options`)."""

    minimums: Sequence[image_codec.MinimumSize | None]
    compute: preprocessing.Preprocess


class Task(ABC):
    """Everything one task means. Its module defines one instance, listed in :mod:`.registry`.

    How a command-line client asks for and shows its answers is not here: that is ``devtools/clients/<name>.py``
    (or the generic client), which reads the task's roles and ``client_batch_size``."""

    name: str
    # The postprocess model's drift features (vision_serving.drift), all of them.
    drift_features: tuple[str, ...]
    # The recipe's [gate] keys and their defaults: the precision ladder's thresholds.
    gate_defaults: ClassVar[Mapping[str, float]]
    # What `builders evaluate --dataset DIR` expects in DIR (one line, for --help and errors).
    dataset_layout: str
    # Images per request a client sends by default (None: the client's own default); the command-line clients
    # (devtools/clients) read it, with the output and request roles.
    client_batch_size: int | None = None
    # The preprocessors of its own a pipeline of this task may name (vision_serving.preprocessors).
    preprocessors: ClassVar[tuple[Preprocessor, ...]] = ()
    # Tiled inference (a spec's [tiling], vision_serving.tiling): the one of its preprocessors that cuts each photo's
    # views; None: its pipelines do not tile.
    tiled_preprocessor: ClassVar[str | None] = None

    @abstractmethod
    def output_roles(self) -> tuple[Role, ...]:
        """The outputs by role (an ensemble's, for clients: every role a config of this task may have)."""

    def request_roles(self) -> tuple[Role, ...]:
        """The optional per-request inputs a client may send (besides the image), by role."""
        return ()

    @abstractmethod
    def config_roles(self, config: ModelConfig) -> tuple[tuple[Role, ...], tuple[Role, ...]]:
        """The input and output roles of a postprocess config with ``config``'s parameters (its tensors may be
        absent): what a pipeline's generated configs declare (the core's outputs fill the ``from_core`` inputs; the
        other required inputs are the preprocess's; the optional ones, the request's)."""

    @abstractmethod
    def postprocessor(self, config: ModelConfig, model_dir: Path) -> Postprocessor:
        """The postprocess model's computation from its config (``model_dir``: its folder, for files it names)."""

    def check(self, config: ModelConfig, model_dir: Path, preprocess: Any) -> list[str]:
        """Problems of a postprocess config (and against its pipeline's preprocess spec), for the
        consistency check; files the build writes may still be missing."""
        try:
            self.postprocessor(config, model_dir)
        except FileNotFoundError:
            pass  # built later (labels)
        except (ConfigError, ValueError) as error:
            return [str(error)]
        return []

    def engine_profiles(self, config: ModelConfig, role: str) -> tuple[EngineProfile, ...]:
        """The TensorRT profiles of the second stage ``role`` the postprocess ``config`` calls, from the inputs this
        task sends it; () when the stage's input dims are fixed (none of this task's stages by default)."""
        return ()

    @abstractmethod
    def gate(self, reference: TaskResult, candidate: TaskResult, limits: Mapping[str, float]) -> dict[str, Any]:
        """FP32's answers against a candidate precision's on the same images: ``gate_report``."""

    @abstractmethod
    def dataset(self, directory: Path, postprocessor: Postprocessor) -> list[LabelledSample]:
        """The labelled images of ``directory`` (``dataset_layout``); ``ValueError`` naming a bad one."""

    @abstractmethod
    def dataset_metrics(self, runs: Sequence[tuple[TaskResult, Sequence[LabelledSample]]]) -> dict[str, float]:
        """The task's own metric over a dataset, run in chunks: (the chunk's result, its samples) each."""

    def gate_request(self, count: int) -> dict[str, np.ndarray]:
        """Optional request inputs by role that a gate of a served pipeline's answers needs (e.g. a k)."""
        return {}

    @abstractmethod
    def response_result(self, postprocessor: Postprocessor, outputs: Mapping[str, np.ndarray]) -> TaskResult:
        """A served batch's outputs (by role) as a result the gate compares (``builders evaluate --server-url``)."""
