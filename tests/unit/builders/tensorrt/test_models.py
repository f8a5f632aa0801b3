"""Which models are served from a plan, their files and configs, the plan cache's keys (builders/tensorrt/models.py)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from builders.artifacts import sha256_file
from builders.tensorrt import interface, models
from tests.support.tensorrt import TINY_CONFIG, tiny_pipeline
from vision_serving import layout, model_config

CLASSIFIER = layout.pipeline("image_classifier")


def test_the_cpu_variant_is_not_taken_for_the_plan(tmp_path):
    pipeline = tiny_pipeline(tmp_path)
    assert models.load_core_config(pipeline).name == "tiny_core"
    config = pipeline.core_dir / "config.pbtxt"
    config.write_text(TINY_CONFIG.replace('platform: "tensorrt_plan"', 'backend: "python"'))
    with pytest.raises(model_config.ConfigError, match=re.escape("tiny_core/config.pbtxt: platform is 'python', expected 'tensorrt_plan'")):
        models.load_core_config(pipeline)


def test_default_paths_are_the_pipelines(tmp_path):
    assert models.default_plan(CLASSIFIER) == CLASSIFIER.plan == CLASSIFIER.core_version_dir / models.PLAN_FILENAME
    pipeline = tiny_pipeline(tmp_path)
    # Before the precision ladder ran: the INT8 Q/DQ model.
    assert models.default_onnx(pipeline) == pipeline.onnx("int8") == pipeline.core_version_dir / models.QDQ_ONNX_FILENAME


def test_default_onnx_is_the_precision_the_ladder_chose(tmp_path):
    pipeline = tiny_pipeline(tmp_path)
    fp16 = pipeline.onnx("fp16")
    fp16.write_bytes(b"fp16 model")
    record = {"precision": "fp16", "onnx": fp16.name, "onnx_sha256": sha256_file(fp16)}
    pipeline.served_precision.write_text(json.dumps(record))
    assert models.default_onnx(pipeline) == fp16
    fp16.write_bytes(b"changed since the ladder measured it")
    assert models.default_onnx(pipeline) == pipeline.onnx("int8")


def test_a_stage_s_plan_is_built_from_its_own_ladder_s_choice(tmp_path):
    text_reader = layout.pipeline("text_reader")
    assert models.default_plan(text_reader, "recognizer") == text_reader.stage_dir("recognizer") / "1" / models.PLAN_FILENAME
    shutil.copytree(text_reader.repository, tmp_path / "text_reader", ignore=shutil.ignore_patterns("*.onnx", "*.json"))
    copy = layout.Pipeline.at(tmp_path / "text_reader")
    assert models.default_onnx(copy, "recognizer") == copy.stage_onnx("recognizer")  # no record: its FP32 export
    fp16 = copy.stage_onnx("recognizer").with_name(layout.FP16_ONNX)
    fp16.write_bytes(b"fp16 recognizer")
    record = {"precision": "fp16", "onnx": fp16.name, "onnx_sha256": sha256_file(fp16)}
    (fp16.parent / layout.SERVED_PRECISION).write_text(json.dumps(record))
    assert models.default_onnx(copy, "recognizer") == fp16
    assert models.cached_name(copy, "recognizer") == "text_reader_recognizer" and models.cached_name(copy) == "text_reader"


def test_cache_keys_and_entries():
    assert models.cache_key("11.4.1.2", "12.0") == "trt11.4.1-sm120"
    # Without hardware compatibility a plan is the GPU model's: so is its cache entry.
    assert models.cache_key("10.8.0.43", "9.0", interface.GPU_MODEL_ONLY, "NVIDIA H100 80GB HBM3") == "trt10.8.0-sm90-nvidia-h100-80gb-hbm3"
    assert models.cache_key("10.16.0.1", "9.0", interface.SAME_COMPUTE_CAPABILITY, "NVIDIA H100 80GB HBM3") == "trt10.16.0-sm90"
    # Each model version (another ONNX: another inputs hash) is its own cache entry.
    first, second = (models.cache_entry(Path("/c"), "trt11.4.1-sm120", "p", h) for h in ("ab" * 32, "cd" * 32))
    assert first == Path("/c/trt11.4.1-sm120/p/abababababababab") and first != second
    # Timing is measured per GPU model, whatever the plan's reach.
    assert models.timing_cache_path(Path("/c"), "trt11.4.1-sm120", "NVIDIA H200") == Path("/c/trt11.4.1-sm120/timing-nvidia-h200.cache")
    assert models.timing_cache_path(None, "k", "NVIDIA L4") == models.BUILD_DIR / "k" / "timing-nvidia-l4.cache"
