"""The depth task: a model's map -> the photo's size on aligned corners, a 16-bit PNG with its scale, float32 on
request, the gate and the dataset metrics (no server)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from vision_serving import model_config
from vision_serving.tasks import depth, registry


def config(dims: str = "1, 8, 8", scale: str | None = None) -> model_config.ModelConfig:
    scale_parameter = f', {{ key: "depth_scale", value: {{ string_value: "{scale}" }} }}' if scale else ""
    return model_config.parse_config_text(
        f"""name: "d_postprocess" backend: "python" max_batch_size: 8
input [ {{ name: "DEPTH" data_type: TYPE_FP32 dims: [ {dims} ] }}, {{ name: "IMAGE_SIZE" data_type: TYPE_INT32 dims: [ 2 ] }},
        {{ name: "FLOAT_DEPTH" data_type: TYPE_BOOL dims: [ 1 ] optional: true }} ]
output [ {{ name: "DEPTH_PNG" data_type: TYPE_STRING dims: [ 1 ] }}, {{ name: "DEPTH_SCALE" data_type: TYPE_FP32 dims: [ 1 ] }},
         {{ name: "DEPTH_RANGE" data_type: TYPE_FP32 dims: [ 2 ] }}, {{ name: "DEPTH_FLOAT32" data_type: TYPE_STRING dims: [ 1 ] }} ]
parameters [ {{ key: "task", value: {{ string_value: "depth" }} }}{scale_parameter} ]"""
    )


def reference_resize(source: np.ndarray, height: int, width: int) -> np.ndarray:
    """torch's bilinear align_corners=True, pixel by pixel in float64 (the predictor's resize, written out)."""
    h, w = source.shape
    out = np.empty((height, width))
    for i in range(height):
        y = i * (h - 1) / (height - 1) if height > 1 else 0.0
        y0 = min(int(np.floor(y)), h - 1)
        y1, fy = min(y0 + 1, h - 1), y - y0
        for j in range(width):
            x = j * (w - 1) / (width - 1) if width > 1 else 0.0
            x0 = min(int(np.floor(x)), w - 1)
            x1, fx = min(x0 + 1, w - 1), x - x0
            top = source[y0, x0] * (1 - fx) + source[y0, x1] * fx
            bottom = source[y1, x0] * (1 - fx) + source[y1, x1] * fx
            out[i, j] = top * (1 - fy) + bottom * fy
    return out


def test_the_task_is_registered_with_its_roles():
    assert registry.task("depth") is depth.TASK
    assert [role.role for role in depth.TASK.request_roles()] == ["float_depth"]


def test_aligned_corners_resize_puts_the_corners_on_the_corners():
    source = np.array([[1, 2], [3, 4]], np.float32)
    assert depth.resize_aligned(source, 3, 3).tolist() == [[1, 1.5, 2], [2, 2.5, 3], [3, 3.5, 4]]
    assert depth.resize_aligned(source[None], 1, 1).tolist() == [[1.0]]


@pytest.mark.parametrize(("size", "to"), [((8, 8), (37, 53)), ((16, 24), (5, 7)), ((6, 9), (6, 9)), ((4, 4), (1, 9)), ((1, 5), (3, 3))])
def test_aligned_corners_resize_equals_the_formula(size, to):
    source = np.random.default_rng(sum(size)).uniform(0.5, 9.0, size).astype(np.float32)
    resized = depth.resize_aligned(source, *to)
    assert resized.shape == to and resized.dtype == np.float32
    np.testing.assert_allclose(resized, reference_resize(source, *to), rtol=1e-6, atol=1e-5)


def test_png_holds_depth_times_scale_in_16_bits_never_zero():
    values = depth.png_values(np.array([[0.0, 0.0004, 1.2344], [65.6, 3.0, 0.5006]], np.float32), 1000)
    assert values.dtype == np.uint16 and values.tolist() == [[1, 1, 1234], [65535, 3000, 501]]
    png = depth.encode_png(values)
    decoded = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_UNCHANGED)
    assert decoded.dtype == np.uint16 and np.array_equal(decoded, values)
    np.testing.assert_allclose(depth.decode_png(png, 1000), values / 1000.0, rtol=1e-6)
    with pytest.raises(ValueError, match="16-bit"):
        depth.decode_png(cv2.imencode(".png", np.zeros((2, 2), np.uint8))[1].tobytes(), 1000)


def test_postprocess_answers_png_scale_range_and_float32_on_request():
    post = depth.TASK.postprocessor(config(scale="256"), model_dir=None)  # type: ignore[arg-type]
    maps = np.random.default_rng(0).uniform(1.0, 60.0, (2, 1, 8, 8)).astype(np.float32)
    sizes = np.array([[30, 40], [9, 5]], np.int32)
    parsed = post.parse({"DEPTH": maps, "IMAGE_SIZE": sizes, "FLOAT_DEPTH": np.array([[False], [True]])})
    outputs = post.run(parsed).outputs()
    assert set(outputs) == {"DEPTH_PNG", "DEPTH_SCALE", "DEPTH_RANGE", "DEPTH_FLOAT32"}
    assert outputs["DEPTH_SCALE"].tolist() == [[256.0], [256.0]]
    for index, (height, width) in enumerate(sizes):
        full = reference_resize(maps[index, 0], int(height), int(width))
        from_png = depth.decode_png(bytes(outputs["DEPTH_PNG"][index, 0]), 256)
        assert from_png.shape == (height, width)
        assert np.abs(from_png - full).max() <= 0.5 / 256 + 1e-4  # the PNG's rounding
        np.testing.assert_allclose(outputs["DEPTH_RANGE"][index], [full.min(), full.max()], rtol=1e-5)
    assert bytes(outputs["DEPTH_FLOAT32"][0, 0]) == b""  # not asked
    exact = depth.decode_float32(bytes(outputs["DEPTH_FLOAT32"][1, 0]), 9, 5)
    np.testing.assert_allclose(exact, reference_resize(maps[1, 0], 9, 5), rtol=1e-5)
    # Without FLOAT_DEPTH: no float32 for anyone.
    quiet = post.run(post.parse({"DEPTH": maps, "IMAGE_SIZE": sizes})).outputs()
    assert [bytes(item) for item in quiet["DEPTH_FLOAT32"].reshape(-1)] == [b"", b""]


def test_a_bad_float_depth_input_is_the_clients_error():
    post = depth.TASK.postprocessor(config(), model_dir=None)  # type: ignore[arg-type]
    maps, sizes = np.ones((2, 1, 8, 8), np.float32), np.array([[4, 4], [4, 4]], np.int32)
    with pytest.raises(ValueError, match="FLOAT_DEPTH must be one boolean per image"):
        post.parse({"DEPTH": maps, "IMAGE_SIZE": sizes, "FLOAT_DEPTH": np.array([[True]])})
    with pytest.raises(ValueError, match="FLOAT_DEPTH"):
        post.parse({"DEPTH": maps, "IMAGE_SIZE": sizes, "FLOAT_DEPTH": np.array([[1], [0]], np.int32)})


def test_config_problems_are_named():
    with pytest.raises(model_config.ConfigError, match="depth_scale must be a positive number"):
        depth.DepthPostprocessor(config(scale="0"))
    with pytest.raises(model_config.ConfigError, match="not one map per image"):
        depth.DepthPostprocessor(config(dims="2, 8, 8"))


def test_gate_passes_the_same_maps_and_fails_a_distorted_one():
    post = depth.DepthPostprocessor(config())
    maps = np.random.default_rng(2).uniform(1.0, 8.0, (3, 1, 8, 8)).astype(np.float32)
    sizes = np.array([[16, 16], [20, 12], [8, 8]], np.int32)
    floats = np.zeros(3, bool)
    reference = depth.DepthResult(post, maps, sizes, floats)
    same = depth.TASK.gate(reference, depth.DepthResult(post, maps.copy(), sizes, floats), depth.TASK.gate_defaults)
    assert all(check["pass"] for check in same["checks"].values()) and same["metrics"]["delta1"] == 1.0
    distorted = depth.TASK.gate(reference, depth.DepthResult(post, maps * 1.3, sizes, floats), depth.TASK.gate_defaults)
    assert not distorted["checks"]["delta1"]["pass"] and not distorted["checks"]["within_range"]["pass"]


def test_a_served_answer_reads_back_as_the_maps(tmp_path):
    post = depth.DepthPostprocessor(config())
    maps = np.random.default_rng(3).uniform(1.0, 8.0, (2, 1, 8, 8)).astype(np.float32)
    sizes = np.array([[11, 13], [7, 6]], np.int32)
    served = depth.DepthResult(post, maps, sizes, np.array([True, False]))
    outputs = served.outputs()
    by_role = {role: outputs[name] for role, name in post.outputs.items() if name is not None}
    read = depth.TASK.response_result(post, by_role)
    assert np.array_equal(read.maps()[0], served.maps()[0])  # the float32 map, exactly
    assert np.abs(read.maps()[1] - served.maps()[1]).max() <= 0.0005 + 1e-6  # from the PNG (millimetres)


def test_dataset_and_its_metrics(tmp_path):
    post = depth.DepthPostprocessor(config())
    truth = np.full((6, 4), 2.0, np.float32)
    truth[0, 0] = 0  # no value there
    cv2.imwrite(str(tmp_path / "a.png"), np.zeros((6, 4, 3), np.uint8))
    cv2.imwrite(str(tmp_path / f"a{depth.DEPTH_SUFFIX}"), np.rint(truth * 1000).astype(np.uint16))
    samples = depth.TASK.dataset(tmp_path, post)
    assert [sample.path.name for sample in samples] == ["a.png"]
    guess = depth.DepthResult(post, None, np.array([[6, 4]]), maps=[np.full((6, 4), 2.2, np.float32)])
    metrics = depth.TASK.dataset_metrics([(guess, samples)])
    assert metrics["abs_rel"] == pytest.approx(0.1, rel=1e-5) and metrics["rmse"] == pytest.approx(0.2, rel=1e-5)
    assert metrics["delta1"] == 1.0
    cv2.imwrite(str(tmp_path / "b.jpg"), np.zeros((6, 4, 3), np.uint8))
    with pytest.raises(ValueError, match=r"b\.jpg: no depth map b\.depth\.png beside it"):
        depth.TASK.dataset(tmp_path, post)


def test_drift_features_are_the_median_and_the_spread():
    post = depth.DepthPostprocessor(config())
    maps = np.ones((1, 1, 8, 8), np.float32) * 2.0
    maps[0, 0, :4] = 8.0
    features = depth.DepthResult(post, maps, np.array([[8, 8]]), np.zeros(1, bool)).features()
    assert set(features.numeric) == set(depth.TASK.drift_features)
    assert features.numeric["median_depth"][0] == pytest.approx(5.0)
    assert features.numeric["depth_spread"][0] == pytest.approx(np.log(4.0))
