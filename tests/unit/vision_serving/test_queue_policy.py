"""Bounded queues and warm-up samples (vision_serving.queue_policy), on the real configs and broken copies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vision_serving import consistency, layout, queue_policy

CLASSIFIER = layout.pipeline("image_classifier")
CONFIGS_ONLY = shutil.ignore_patterns("1", "__pycache__")


@pytest.fixture
def pipeline(tmp_path) -> Path:
    """A copy of the classifier pipeline's configs (no version folders)."""
    return Path(shutil.copytree(CLASSIFIER.repository, tmp_path / CLASSIFIER.name, ignore=CONFIGS_ONLY))


def problems_of(repository: Path) -> list[str]:
    models, parse_problems = consistency.load_repository(repository)
    assert parse_problems == []
    return queue_policy.check_pipeline(models, repository)


def edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, count))


def queue_size_line(path: Path) -> str:
    return next(line for line in path.read_text().splitlines() if "max_queue_size:" in line)


@pytest.mark.parametrize("pipeline_name", [p.name for p in layout.pipelines()])
def test_every_composing_model_of_every_pipeline_has_a_bounded_rejecting_queue(pipeline_name):
    repository = layout.pipeline(pipeline_name).repository
    assert problems_of(repository) == []
    models, _ = consistency.load_repository(repository)
    for name, variants in models.items():
        for config in variants.values():
            if config.platform == "ensemble":
                continue
            policy = config.dynamic_batching.default_queue_policy
            assert policy.max_queue_size >= queue_policy.MIN_QUEUE_SIZE, name
            assert policy.timeout_action == queue_policy.REJECT and policy.allow_timeout_override, name


def test_production_cores_warm_up_at_batch_1_and_max_batch(pipeline):
    for p in layout.pipelines():
        config = consistency.load_repository(p.repository)[0][p.model_name("core")][""]
        # every profile of a dynamic-shape core at its opt batch (1 here) and at max_batch_size (vision_serving.engine_profiles)
        assert {w.batch_size for w in config.model_warmup} == {1, config.max_batch_size}, p.name


@pytest.mark.parametrize(
    "file, old, new, problem",
    [
        ("preprocess/config.pbtxt", "    max_queue_size:", "    # max_queue_size:", "unbounded queue"),
        (
            "postprocess/config.pbtxt",
            "default_queue_policy {",
            "default_queue_policy {\n    timeout_action: DELAY",
            "timeout_action must be REJECT",
        ),
        ("core/configs/cpu.pbtxt", "allow_timeout_override: true", "allow_timeout_override: false", "allow_timeout_override must be true"),
        ("core/configs/cpu_int8.pbtxt", "    default_timeout_microseconds:", "    # default_timeout_microseconds:", "must be set"),
    ],
)
def test_unbounded_or_non_rejecting_queue_is_reported(pipeline, file, old, new, problem):
    role, _, rest = file.partition("/")
    edit(pipeline / f"{CLASSIFIER.name}_{role}" / rest, old, new)
    problems = problems_of(pipeline)
    assert any(problem in p for p in problems), problems


def test_queue_below_a_16_client_burst_is_reported(pipeline):
    path = pipeline / f"{CLASSIFIER.name}_preprocess" / "config.pbtxt"
    edit(path, queue_size_line(path), "    max_queue_size: 8")
    assert any("max_queue_size 8 is below 16" in p for p in problems_of(pipeline))


def test_downstream_queue_must_hold_what_the_step_before_hands_over(pipeline):
    core = pipeline / f"{CLASSIFIER.name}_core" / "config.pbtxt"
    edit(core, queue_size_line(core), "    max_queue_size: 16")
    problems = problems_of(pipeline)
    # Two preprocess instances, each completing one batch of up to min(max_batch_size, its queue).
    assert any(p.startswith(f"{CLASSIFIER.name}_core: max_queue_size 16 is smaller than what") for p in problems), problems


def test_cpu_core_is_sized_by_its_own_rate_not_by_the_hand_over(pipeline):
    """On CPU the core can be the slowest step; its queue is where rejections happen (module docstring)."""
    cpu = pipeline / f"{CLASSIFIER.name}_core" / "configs" / "cpu.pbtxt"
    edit(cpu, queue_size_line(cpu), "    max_queue_size: 16")
    assert not [p for p in problems_of(pipeline) if "_core (with --model-config-name=cpu)" in p]
    post = pipeline / f"{CLASSIFIER.name}_postprocess" / "config.pbtxt"
    edit(post, queue_size_line(post), "    max_queue_size: 17")
    assert any(p.startswith(f"{CLASSIFIER.name}_postprocess (with --model-config-name=cpu)") for p in problems_of(pipeline))


@pytest.mark.parametrize(
    "old, new, problem",
    [
        ("    batch_size: 32", "    batch_size: 64", "batch_size 64 is not between 1 and max_batch_size 32"),
        ('key: "images" value', 'key: "pixels" value', "'pixels' is not an input of the model"),
        ("data_type: TYPE_UINT8 dims: [3, 224, 224] zero_data", "data_type: TYPE_FP16 dims: [3, 224, 224] zero_data", "is TYPE_FP16"),
        ("dims: [3, 224, 224] zero_data", "dims: [3, 256, 224] zero_data", "dims [3, 256, 224] do not fit"),
        ("zero_data: true", 'input_data_file: "photo.raw"', "which does not exist"),
    ],
)
def test_warmup_samples_must_match_the_inputs(pipeline, old, new, problem):
    edit(pipeline / f"{CLASSIFIER.name}_core" / "config.pbtxt", old, new)
    problems = problems_of(pipeline)
    assert any(problem in p for p in problems), problems


def test_warmup_data_file_in_the_warmup_folder_is_accepted(pipeline):
    core = pipeline / f"{CLASSIFIER.name}_core"
    edit(core / "config.pbtxt", "zero_data: true", 'input_data_file: "photo.raw"', count=2)
    (core / "warmup").mkdir()
    (core / "warmup" / "photo.raw").write_bytes(b"\0" * (3 * 224 * 224 * 4))
    assert problems_of(pipeline) == []
