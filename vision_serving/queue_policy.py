"""Bounded queues and warm-up samples: the rules every composing model's config must follow.

Used by ``python -m vision_serving.consistency``; the sizes themselves come from
``python -m benchmarks.systems --service-rates`` (docs/design.md, "Queues and overload").

- **Bounded queue.** Every composing model (Triton's ensemble has no queue of its
  own; a composing model that rejects fails the ensemble request) has
  ``dynamic_batching { default_queue_policy { ... } }`` with a ``max_queue_size``,
  a ``default_timeout_microseconds``, ``timeout_action: REJECT`` and
  ``allow_timeout_override: true`` (a client may ask for a shorter wait, per
  request). A full queue rejects at once with UNAVAILABLE.
- **At least** :data:`MIN_QUEUE_SIZE`: one request per client of the 16-client
  closed loops the load tests run, arriving together, is never rejected.
- **Bursts.** A step's queue holds what the step before it can hand over at once:
  each upstream instance completing one batch, ``instances x min(max_batch_size,
  max_queue_size)`` (a batch is taken from a queue of at most ``max_queue_size``).
  When the step is faster than the one before it (the production core, a TensorRT
  engine on GPU, behind CPU preprocessing), a request the first step admitted is
  therefore never rejected later. The CPU cores of ``configs/*.pbtxt`` are exempt:
  on CPU the core can be the slowest step (the classifier's, measured), where a
  queue fills whatever its size, so its size comes from its own service rate and
  the latency budget, and it is where rejections happen.
- **Warm-up samples** (``model_warmup``) match the model's inputs: every input
  named once with its dtype and dims, one data source each, a batch size between
  1 and ``max_batch_size``, ``input_data_file`` present in the model's ``warmup/``
  folder (where Triton reads it). A TensorRT model whose input has dynamic dims also
  warms up every profile (``vision_serving.engine_profiles``).
"""

from __future__ import annotations

import itertools
from pathlib import Path

from .model_config import ModelConfig, model_config_pb2

MIN_QUEUE_SIZE = 16
REJECT = model_config_pb2.ModelQueuePolicy.TimeoutAction.Value("REJECT")
# How long a request may wait in a composing model's queue before it is rejected, unless it asks for less.
DEFAULT_TIMEOUT_MICROSECONDS = 10_000_000


def bounded_queue(max_queue_size: int, timeout_microseconds: int = DEFAULT_TIMEOUT_MICROSECONDS) -> model_config_pb2.ModelQueuePolicy:
    """The queue policy every composing model has (see the module docstring): bounded, rejecting, overridable."""
    return model_config_pb2.ModelQueuePolicy(
        timeout_action=REJECT,
        default_timeout_microseconds=timeout_microseconds,
        allow_timeout_override=True,
        max_queue_size=max_queue_size,
    )


def instance_count(config: ModelConfig) -> int:
    """Model instances: the instance groups' counts (Triton's default is 1 per group)."""
    return sum(group.count or 1 for group in config.instance_group) or 1


def max_queue_size(config: ModelConfig) -> int:
    """The bound of the model's default queue; 0 means unbounded."""
    return int(config.dynamic_batching.default_queue_policy.max_queue_size)


def burst(upstream: ModelConfig) -> int:
    """The most requests ``upstream`` can complete at once: one batch per instance."""
    per_instance = config_batch = max(int(upstream.max_batch_size), 1)
    if max_queue_size(upstream):
        per_instance = min(config_batch, max_queue_size(upstream))
    return instance_count(upstream) * per_instance


def check_queue_policy(config: ModelConfig, where: str) -> list[str]:
    """A composing model's queue is bounded and rejects (see the module docstring)."""
    if not config.HasField("dynamic_batching"):
        return [f"{where}: no dynamic_batching, so no bounded queue (add default_queue_policy, docs/design.md)"]
    policy = config.dynamic_batching.default_queue_policy
    problems = []
    if policy.max_queue_size <= 0:
        problems.append(f"{where}: unbounded queue: set dynamic_batching.default_queue_policy.max_queue_size")
    elif policy.max_queue_size < MIN_QUEUE_SIZE:
        problems.append(f"{where}: max_queue_size {policy.max_queue_size} is below {MIN_QUEUE_SIZE} (a 16-client burst)")
    if policy.timeout_action != REJECT:
        problems.append(f"{where}: default_queue_policy.timeout_action must be REJECT")
    if policy.default_timeout_microseconds <= 0:
        problems.append(f"{where}: default_queue_policy.default_timeout_microseconds must be set (a request's longest wait)")
    if not policy.allow_timeout_override:
        problems.append(f"{where}: default_queue_policy.allow_timeout_override must be true (clients may ask for a shorter wait)")
    return problems


def check_bursts(chain: list[tuple[ModelConfig, bool]], label: str = "") -> list[str]:
    """Along the ensemble's steps, each queue holds the previous step's burst.

    ``chain``: the composing models in step order, each with ``exempt`` (a CPU core
    variant, sized from its own service rate)."""
    problems = []
    for (upstream, _), (downstream, exempt) in itertools.pairwise(chain):
        need = burst(upstream)
        if exempt or not max_queue_size(downstream) or max_queue_size(downstream) >= need:
            continue
        problems.append(
            f"{downstream.name}{label}: max_queue_size {max_queue_size(downstream)} is smaller than what {upstream.name} "
            f"can hand over at once ({instance_count(upstream)} instances x {need // instance_count(upstream)} = {need}): "
            "requests it admitted could be rejected here"
        )
    return problems


def check_warmup(config: ModelConfig, model_dir: Path, where: str) -> list[str]:
    """``model_warmup`` samples match the model's inputs (see the module docstring)."""
    problems = []
    inputs = {tensor.name: tensor for tensor in config.input}
    for warmup in config.model_warmup:
        sample = f"{where}: model_warmup '{warmup.name}'"
        if not warmup.name:
            problems.append(f"{where}: a model_warmup sample has no name")
        if warmup.batch_size < 1 or (config.max_batch_size > 0 and warmup.batch_size > config.max_batch_size):
            problems.append(f"{sample}: batch_size {warmup.batch_size} is not between 1 and max_batch_size {config.max_batch_size}")
        missing = sorted(name for name, tensor in inputs.items() if name not in warmup.inputs and not tensor.optional)
        if missing:
            problems.append(f"{sample}: no data for input(s) {missing}")
        for name, data in warmup.inputs.items():
            tensor = inputs.get(name)
            if tensor is None:
                problems.append(f"{sample}: '{name}' is not an input of the model ({sorted(inputs)})")
                continue
            if data.data_type != tensor.data_type:
                names = model_config_pb2.DataType.Name
                problems.append(f"{sample}: '{name}' is {names(data.data_type)}, the input is {names(tensor.data_type)}")
            declared = [int(d) for d in tensor.dims]
            given = [int(d) for d in data.dims]
            if len(given) != len(declared) or any(g < 1 or (d != -1 and g != d) for g, d in zip(given, declared)):
                problems.append(f"{sample}: '{name}' dims {given} do not fit the input's {declared} (no batch dim, no -1)")
            source = data.WhichOneof("input_data_type")
            if source is None:
                problems.append(f"{sample}: '{name}' has no data (zero_data, random_data or input_data_file)")
            elif source == "input_data_file" and not (model_dir / "warmup" / data.input_data_file).is_file():
                problems.append(f"{sample}: '{name}' reads {model_dir / 'warmup' / data.input_data_file}, which does not exist")
    return problems


def check_pipeline(models: dict[str, dict[str, ModelConfig]], repository: Path) -> list[str]:
    """Every composing model's configs (``{model: {variant: config}}``, variant '' for config.pbtxt) of one
    pipeline: bounded queues, warm-up samples, and the bursts along each variant's chain of steps."""
    problems = []
    ensembles = [config for variants in models.values() for config in variants.values() if config.platform == "ensemble"]
    for name, variants in models.items():
        for variant, config in variants.items():
            if config.platform == "ensemble":
                continue
            where = f"{name}/{f'configs/{variant}' if variant else 'config'}.pbtxt"
            problems += check_queue_policy(config, where)
            problems += check_warmup(config, repository / name, where)
    variant_names = sorted({variant for variants in models.values() for variant in variants})
    for ensemble in ensembles:
        steps = [step.model_name for step in ensemble.ensemble_scheduling.step]
        if not all(step in models for step in steps):
            continue  # reported by the wiring check
        for variant in variant_names:
            chain = [(models[s].get(variant, models[s].get("")), bool(variant) and variant in models[s]) for s in steps]
            if any(config is None for config, _ in chain):
                continue
            # Only the core of a CPU variant is exempt (module docstring); other variant files are not.
            resolved = [(config, exempt and config.name.endswith("_core")) for config, exempt in chain if config is not None]
            problems += check_bursts(resolved, f" (with --model-config-name={variant})" if variant else "")
    return list(dict.fromkeys(problems))
