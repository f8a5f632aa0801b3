"""Optimization profiles: the shapes a plan is built for.

Batch 1 .. ``max_batch_size`` of the model's config, ``--opt-batch`` in between. Fixed dims come from the config;
dynamic dims (and their own opt batch) from the code that makes the input (``vision_serving.engine_profiles``: the
text detector's preprocess, the text recognizer's width buckets), one plan profile each. Profile ``i`` of the plan
is an instance group's ``profile: ["i"]`` in the Triton config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from builders.tensorrt.models import ModelConfig
from vision_serving.model_config import ConfigError

if TYPE_CHECKING:
    from vision_serving.tasks.base import EngineProfile


@dataclass(frozen=True)
class InputProfile:
    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]

    def as_dict(self) -> dict[str, list[int]]:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


def optimization_profile(core: ModelConfig, opt_batch: int | None = None) -> list[InputProfile]:
    """min/opt/max shapes per core input: batch 1 .. max_batch_size (opt: ``opt_batch``, default the max)."""
    max_batch = int(core.max_batch_size)
    profiles = []
    for tensor in core.input:
        dims = tuple(int(d) for d in tensor.dims)
        if any(d < 1 for d in dims):
            raise ConfigError(
                f"model '{core.name}': input '{tensor.name}' has variable dims {list(dims)}; the plan profile needs fixed non-batch dims"
            )
        if max_batch == 0:
            if opt_batch is not None:
                raise ConfigError(f"model '{core.name}': max_batch_size is 0 (no batching), so --opt-batch does not apply")
            profiles.append(InputProfile(tensor.name, dims, dims, dims))
            continue
        opt = max_batch if opt_batch is None else opt_batch
        if not 1 <= opt <= max_batch:
            raise ConfigError(f"--opt-batch {opt} is outside 1..{max_batch} (max_batch_size of model '{core.name}')")
        profiles.append(InputProfile(tensor.name, (1, *dims), (opt, *dims), (max_batch, *dims)))
    if not profiles:
        raise ConfigError(f"model '{core.name}' has no inputs")
    return profiles


def optimization_profiles(
    config: ModelConfig, opt_batch: int | None = None, ranges: Sequence[EngineProfile] = ()
) -> list[list[InputProfile]]:
    """Every optimization profile of a model: one profile when its input dims are fixed
    (:func:`optimization_profile`); with dynamic dims, one per ``ranges`` entry (the profiles the code that makes its
    input gives it: :func:`vision_serving.engine_profiles.for_model`), batch 1 .. ``max_batch_size`` before them,
    tuned for the profile's own batch (``opt_batch`` overrides it)."""
    dims = [tuple(int(d) for d in tensor.dims) for tensor in config.input]
    if all(d > 0 for shape in dims for d in shape):
        if ranges:
            raise ConfigError(
                f"model '{config.name}': its input dims are fixed ({[list(d) for d in dims]}); its input's code gives it profiles"
            )
        return [optimization_profile(config, opt_batch)]
    if len(config.input) != 1 or not ranges:
        raise ConfigError(
            f"model '{config.name}': input dims {[list(d) for d in dims]} are dynamic; the plan needs the profiles of its one input "
            "from the code that makes it (a preprocessor's or a task's engine_profiles)"
        )
    max_batch = int(config.max_batch_size)
    tensor, shape = config.input[0], dims[0]
    profiles = []
    for item in ranges:
        opt = item.opt_batch if opt_batch is None else opt_batch
        if max_batch < 1 or not 1 <= opt <= max_batch:
            raise ConfigError(f"model '{config.name}': opt batch {opt} is outside 1..{max_batch} (max_batch_size)")
        fits = len(item.max) == len(shape) and all(d == -1 or lo == hi == d for d, lo, hi in zip(shape, item.min, item.max))
        if not fits:
            raise ConfigError(f"model '{config.name}': profile {list(item.min)}..{list(item.max)} does not fit input dims {list(shape)}")
        profiles.append([InputProfile(tensor.name, (1, *item.min), (opt, *item.opt), (max_batch, *item.max))])
    return profiles


def profile_record(profile_sets: Sequence[Sequence[InputProfile]]) -> object:
    """How the provenance records the profiles: ``{input: {min, opt, max}}`` for one profile, a list of them for several."""
    records = [{p.name: p.as_dict() for p in profiles} for profiles in profile_sets]
    return records[0] if len(records) == 1 else records
