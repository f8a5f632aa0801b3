"""builders.build_all: ``all``'s sequence and the local server's are taken from one set of named steps."""

from __future__ import annotations

from builders import build_all, loaded
from vision_serving import layout


def test_all_runs_every_step_but_quantize_which_its_ladder_runs():
    pipeline = loaded.load(layout.pipeline("image_classifier"))
    assert [name for name, _ in build_all.steps(pipeline, force=False)] == list(build_all.ALL_STEPS)
    assert set(build_all.ALL_STEPS) | {"quantize"} == set(build_all.named_steps(pipeline, force=False))


def test_serving_builds_what_the_served_config_reads():
    pipeline = loaded.load(layout.pipeline("image_classifier"))
    assert [name for name, _ in build_all.serving_steps(pipeline, None)] == ["export", "drift-reference"]
    assert [name for name, _ in build_all.serving_steps(pipeline, "cpu_int8")] == ["export", "quantize", "drift-reference"]
    assert [name for name, _ in build_all.serving_steps(pipeline, "cpu_openvino")] == ["export", "drift-reference"]
