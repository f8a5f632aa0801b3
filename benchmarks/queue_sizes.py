"""Queue sizes from measured service rates (``python -m benchmarks.systems --service-rates``).

1. **Service rates.** Over a window of the ensemble at saturation, Triton's statistics give each
   composing model's executions and their own compute time (``benchmarks.triton_stats``: ``busy_s``).
   A step's service rate is what its instances complete while busy::

       rate = instances x images / busy time      (images per second)

   With every step sharing the same CPUs the busy times include that contention: the step whose
   rate is lowest is the bottleneck, and its rate is about the ensemble's throughput.

2. **Sizes.** A queue of ``rate x budget`` requests drains within the budget, so a request admitted
   to it waits at most about the budget before it executes::

       max_queue_size = max(ceil(rate x budget), floor)

   ``floor`` is ``vision_serving.queue_policy.MIN_QUEUE_SIZE`` (16: a burst of one request per
   client of the load tests' closed loops) and, after the first step, what the previous step can
   hand over at once (each instance completing one batch: ``instances x min(max_batch_size, its
   max_queue_size)``), except for the CPU core, which may be the slowest step (module docstring of
   ``vision_serving.queue_policy``). The production sizes (``config.pbtxt``: TensorRT on GPU, not
   measurable here) keep the CPU steps' measured rates and size the GPU core's queue and the next by
   the hand-over alone.
"""

from __future__ import annotations

import math
from typing import Any

from vision_serving import layout, model_config, queue_policy


def composing_configs(pipeline: layout.Pipeline, config_name: str) -> dict[str, model_config.ModelConfig]:
    """The composing models in step order, as the server loads them with ``config_name``."""
    return {pipeline.model_name(role): model_config.load_config(pipeline.model_dir(role), config_name) for role in layout.ROLES}


def service_rates(window: dict[str, dict[str, Any]], instances: dict[str, int]) -> dict[str, dict[str, float]]:
    """Per model of a window's statistics (``triton_stats.delta``): images, executions, mean batch,
    mean execution ms and the service rate (images/s while busy)."""
    rates = {}
    for model, count in instances.items():
        stats = window.get(model) or {}
        executions, items, busy_s = stats.get("executions") or 0, stats.get("items") or 0, stats.get("busy_s") or 0.0
        if not executions or not busy_s:
            continue
        rates[model] = {
            "instances": count,
            "images": items,
            "executions": executions,
            "mean_batch": round(items / executions, 2),
            "execution_ms": round(busy_s * 1e3 / executions, 2),
            "rate": round(count * items / busy_s, 1),
        }
    return rates


def derived_size(rate: float, budget_s: float, floor: int) -> int:
    """The queue that drains within ``budget_s`` at ``rate`` images/s, at least ``floor``."""
    return max(math.ceil(rate * budget_s), floor)


def handover(config: model_config.ModelConfig, size: int, instances: int | None = None) -> int:
    """What a step with queue ``size`` can complete at once: one batch per instance."""
    return (instances or queue_policy.instance_count(config)) * min(config.max_batch_size, size)


def sizes_along(
    configs: dict[str, model_config.ModelConfig],
    rates: dict[str, dict[str, float]],
    budget_s: float,
    exempt_core: bool,
    instances: dict[str, int] | None = None,
) -> dict[str, tuple[int, int]]:
    """{model: (size, floor)} in step order: rate x budget, at least MIN_QUEUE_SIZE and the previous
    step's hand-over (except the core of a CPU variant, vision_serving.queue_policy)."""
    sizes: dict[str, tuple[int, int]] = {}
    previous: tuple[model_config.ModelConfig, int, int | None] | None = None
    for name, config in configs.items():
        floor = queue_policy.MIN_QUEUE_SIZE
        if previous is not None and not (exempt_core and name.endswith("_core")):
            floor = max(floor, handover(*previous))
        rate = rates.get(name, {}).get("rate")
        size = derived_size(rate, budget_s, floor) if rate else floor
        sizes[name] = (size, floor)
        previous = (config, size, (instances or {}).get(name))
    return sizes


def sized_rows(
    pipeline: layout.Pipeline, config_name: str, window: dict[str, dict[str, Any]], instances: dict[str, int], budget_s: float
) -> list[dict]:
    """One row per composing model: its service rate, the size it implies for ``config_name`` (the CPU
    server's) and for production (``config.pbtxt``)."""
    configs = composing_configs(pipeline, config_name)
    rates = service_rates(window, instances)
    measured = sizes_along(configs, rates, budget_s, exempt_core=True, instances=instances)
    # Production cannot be measured here: the CPU steps keep their measured rates (the same code, at least
    # as many cores), the GPU core is taken as faster than its preprocessing: sized by the hand-over.
    cpu_rates = {name: row for name, row in rates.items() if not name.endswith("_core")}
    production = sizes_along(composing_configs(pipeline, ""), cpu_rates, budget_s, exempt_core=False)
    found = []
    for name in configs:
        rate = rates.get(name)
        size, floor = measured[name]
        # Preprocess and postprocess have one config for both: the larger of the two sizes.
        production_size = production[name][0] if name.endswith("_core") else max(production[name][0], size)
        found.append(
            {
                "pipeline": pipeline.name,
                "model": name,
                **(rate or {"instances": instances.get(name)}),
                "rate_x_budget": round(rate["rate"] * budget_s, 1) if rate else None,
                "floor": floor,
                "max_queue_size": size,
                "production_max_queue_size": production_size,
            }
        )
    return found
