"""Queue sizes from measured service rates: rate x budget, at least the floor and the previous step's hand-over."""

from __future__ import annotations

import pytest

from benchmarks import queue_sizes
from vision_serving import layout, model_config, queue_policy

CLASSIFIER = layout.pipeline("image_classifier")
PRE, CORE, POST = (CLASSIFIER.model_name(role) for role in layout.ROLES)


def window(items: int, executions: int, busy_s: float) -> dict:
    """One model's window statistics, as benchmarks.triton_stats.delta gives them."""
    return {"items": items, "executions": executions, "busy_s": busy_s, "requests": items}


def test_service_rate_is_what_the_instances_complete_while_busy():
    rates = queue_sizes.service_rates({PRE: window(200, 80, 5.0), CORE: window(0, 0, 0.0)}, {PRE: 2, CORE: 2})
    assert rates[PRE] == {"instances": 2, "images": 200, "executions": 80, "mean_batch": 2.5, "execution_ms": 62.5, "rate": 80.0}
    assert CORE not in rates  # nothing executed: no rate


def config(max_batch: int, instances: int) -> model_config.ModelConfig:
    return model_config.parse_config_text(f'name: "m" max_batch_size: {max_batch} instance_group [{{ count: {instances} kind: KIND_CPU }}]')


def test_sizes_along_the_steps():
    configs = {PRE: config(8, 2), CORE: config(32, 2), POST: config(32, 1)}
    rates = {PRE: {"rate": 30.0}, CORE: {"rate": 12.0}, POST: {"rate": 230.0}}
    sizes = queue_sizes.sizes_along(configs, rates, budget_s=0.25, exempt_core=True)
    floor = queue_policy.MIN_QUEUE_SIZE
    assert sizes[PRE] == (floor, floor)  # 30 x 0.25 = 7.5 < 16
    assert sizes[CORE] == (floor, floor)  # the CPU core is exempt from the hand-over floor
    assert sizes[POST] == (58, 2 * min(32, floor))  # 230 x 0.25 = 57.5, above the core's hand-over of 32
    gpu = queue_sizes.sizes_along(configs, {PRE: {"rate": 30.0}}, budget_s=0.25, exempt_core=False)
    assert gpu[CORE] == (16, 16) and gpu[POST] == (32, 32)  # sized by the previous step's hand-over alone
    # The instances the server actually runs (sized to its CPUs) set the hand-over, not the config's count.
    sized = queue_sizes.sizes_along(configs, {}, budget_s=0.25, exempt_core=False, instances={PRE: 4})
    assert sized[CORE] == (32, 32)  # 4 instances x min(8, 16)
    assert queue_sizes.derived_size(100.0, 0.25, 16) == 25


def test_rows_of_the_real_pipeline():
    stats = {PRE: window(300, 120, 10.0), CORE: window(300, 70, 25.0), POST: window(300, 70, 1.3)}
    rows = queue_sizes.sized_rows(CLASSIFIER, "cpu", stats, {PRE: 2, CORE: 2, POST: 1}, budget_s=0.25)
    assert [row["model"] for row in rows] == [PRE, CORE, POST]
    post = rows[2]
    assert post["rate"] == pytest.approx(230.8) and post["max_queue_size"] == 58 and post["rate_x_budget"] == pytest.approx(57.7)
    assert all(row["production_max_queue_size"] >= row["floor"] for row in rows)
