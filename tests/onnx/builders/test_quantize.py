"""The quantize step: Q/DQ property checks, the calibration set, and the real chain on the default model."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import arguments, calibration, cli, layer_groups, loaded, recipe
from builders import quantize as q
from tests.support.pipelines import CALIBRATION_SAMPLES, REDUCED_GATE, built_classifier
from vision_serving import layout
from vision_serving.served import ServedInputs

CLASSIFIER = loaded.load(layout.pipeline("image_classifier"))
SEGMENTER = loaded.load(layout.pipeline("person_segmenter"))
# A reduced calibration keeps CI time sane; the default (512 samples) runs in the slow test.


# --------------------------------------------------------------------------- Q/DQ checker on small graphs


INT8_ZERO = np.int8(0)


def qdq_model(
    activation_zero_point: np.ndarray | None = INT8_ZERO,
    weight_scale: np.ndarray | None = None,
    weight_zero_point: np.ndarray | None = None,
    weight_axis: int = 0,
    extra_nodes: tuple = (),
    extra_opsets: tuple = (),
) -> onnx.ModelProto:
    """x -> Q/DQ (activation) -> Conv(W via Q/DQ) -> y; by default TensorRT-style INT8."""
    rng = np.random.default_rng(0)
    weight = rng.normal(size=(8, 4, 3, 3)).astype(np.float32)
    if weight_scale is None:
        weight_scale = (np.abs(weight).reshape(8, -1).max(axis=1) / 127).astype(np.float32)
    if weight_zero_point is None:
        weight_zero_point = np.zeros(weight_scale.shape, dtype=np.int8)
    initializers = [
        numpy_helper.from_array(weight, "W"),
        numpy_helper.from_array(np.array(0.05, dtype=np.float32), "x_scale"),
        numpy_helper.from_array(np.asarray(weight_scale, dtype=np.float32), "w_scale"),
        numpy_helper.from_array(np.asarray(weight_zero_point), "w_zero_point"),
    ]
    x_q_inputs = ["x", "x_scale"]
    if activation_zero_point is not None:
        initializers.append(numpy_helper.from_array(np.asarray(activation_zero_point), "x_zero_point"))
        x_q_inputs.append("x_zero_point")
    nodes = [
        helper.make_node("QuantizeLinear", x_q_inputs, ["x_q"], name="x_q"),
        helper.make_node("DequantizeLinear", ["x_q", *x_q_inputs[1:]], ["x_dq"], name="x_dq"),
        helper.make_node("QuantizeLinear", ["W", "w_scale", "w_zero_point"], ["w_q"], name="w_q", axis=weight_axis),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero_point"], ["w_dq"], name="w_dq", axis=weight_axis),
        helper.make_node("Conv", ["x_dq", "w_dq"], ["y"], name="conv", pads=[1, 1, 1, 1]),
        *extra_nodes,
    ]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        initializers,
    )
    opsets = [helper.make_opsetid("", 19), *(helper.make_opsetid(domain, 1) for domain in extra_opsets)]
    return helper.make_model(graph, opset_imports=opsets)


def test_conforming_qdq_graph_passes():
    model = qdq_model()
    onnx.checker.check_model(model, full_check=True)
    assert q.qdq_violations(model) == []
    summary = q.qdq_summary(model)
    assert summary["quantize_linear"] == summary["dequantize_linear"] == 2
    assert summary["quantized_ops"] == {"Conv": 1}


def test_conforming_qdq_graph_runs_on_onnxruntime():
    import onnxruntime

    session = onnxruntime.InferenceSession(qdq_model().SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": np.ones((1, 4, 8, 8), dtype=np.float32)})
    assert y.shape == (1, 8, 8, 8) and np.isfinite(y).all()


@pytest.mark.parametrize(
    "model, message",
    [
        (qdq_model(activation_zero_point=np.int8(3)), "zero-point is not 0"),
        (qdq_model(activation_zero_point=np.uint8(0)), "uint8 Q/DQ is not int8"),
        (qdq_model(activation_zero_point=None), "no zero-point, so the output is uint8"),
        (qdq_model(weight_zero_point=np.full(8, 1, dtype=np.int8)), "zero-point is not 0"),
        (qdq_model(weight_scale=np.float32(0.01), weight_zero_point=np.int8(0)), "quantized per-tensor, not per-channel"),
        (qdq_model(weight_scale=np.full(4, 0.01, dtype=np.float32), weight_axis=1), "expected per-channel on axis 0"),
        (qdq_model(weight_scale=np.full(8, -0.01, dtype=np.float32)), "non-positive"),
        (
            qdq_model(
                extra_nodes=(helper.make_node("Gelu", ["y"], ["z"], name="gelu", domain="com.microsoft"),),
                extra_opsets=("com.microsoft",),
            ),
            "non-standard domain 'com.microsoft'",
        ),
    ],
    ids=["act-zp-3", "act-uint8", "act-no-zp", "weight-zp-1", "weight-per-tensor", "weight-axis-1", "negative-scale", "custom-domain"],
)
def test_violations_are_named(model, message):
    problems = q.qdq_violations(model)
    assert any(message in problem for problem in problems), problems


def test_graph_without_qdq_is_a_violation():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "plain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    assert q.qdq_violations(helper.make_model(graph)) == ["the graph has no QuantizeLinear/DequantizeLinear nodes"]


def test_activation_per_channel_is_a_violation():
    model = qdq_model()
    for init in model.graph.initializer:
        if init.name == "x_scale":
            init.CopyFrom(numpy_helper.from_array(np.full(4, 0.05, dtype=np.float32), "x_scale"))
        if init.name == "x_zero_point":
            init.CopyFrom(numpy_helper.from_array(np.zeros(4, dtype=np.int8), "x_zero_point"))
    assert any("activations must be per-tensor" in p for p in q.qdq_violations(model))


# --------------------------------------------------------------------------- calibration set


@pytest.fixture(scope="module")
def served():
    return ServedInputs(CLASSIFIER.configs)


@pytest.fixture(scope="module")
def split():
    """(calibration, evaluation) photo names of the classifier's recipe."""
    return calibration.photo_split(CLASSIFIER)


def test_split_is_disjoint_and_named(split):
    calibration_photos, evaluation_photos = split
    section = CLASSIFIER.recipe.quantize
    assert (calibration_photos, evaluation_photos) == (section.calibration_photos, section.evaluation_photos)
    assert len(calibration_photos) >= calibration.MIN_CALIBRATION_PHOTOS and evaluation_photos
    assert not set(calibration_photos) & set(evaluation_photos)
    # The motorcycle stereo pair is near-duplicate: both on the held-out side.
    assert {"motorcycle_left", "motorcycle_right"} <= set(evaluation_photos)
    with pytest.raises(calibration.CalibrationError, match="overlap: coffee"):
        calibration.check_disjoint(["astronaut", "coffee"], evaluation_photos)


def test_each_pipeline_has_its_own_split():
    segmenter_calibration, segmenter_evaluation = calibration.photo_split(SEGMENTER)
    assert not set(segmenter_calibration) & set(segmenter_evaluation)
    assert (segmenter_calibration, segmenter_evaluation) != calibration.photo_split(CLASSIFIER)


def test_a_recipe_with_overlapping_photos_is_refused(tmp_path):
    copy = layout.Pipeline.at(tmp_path / CLASSIFIER.name)
    copy.repository.mkdir()
    text = CLASSIFIER.layout.recipe.read_text()
    assert 'calibration_photos = ["astronaut",' in text
    copy.recipe.write_text(text.replace('calibration_photos = ["astronaut",', 'calibration_photos = ["coffee", "astronaut",', 1))
    with pytest.raises(recipe.RecipeError, match="calibration and evaluation photos overlap: coffee"):
        recipe.load(copy.recipe, CLASSIFIER.task)


def test_calibration_samples_come_only_from_calibration_photos(served, split):
    limits = served.limits
    sources = calibration.calibration_sources(CLASSIFIER)
    assert len(sources) >= calibration.MIN_CALIBRATION_PHOTOS
    samples = calibration.make_samples(sources, 24, 1, calibration.CALIBRATION_PROFILE, limits)
    assert {s.source for s in samples} <= set(split[0])
    held_out = {s.sha256 for s in calibration.evaluation_sources(CLASSIFIER)}
    assert {s.name for s in calibration.evaluation_sources(CLASSIFIER)} <= set(split[1])
    assert not {calibration.Source("", s.data).sha256 for s in samples} & held_out


def test_same_seed_same_samples_other_seed_other_samples(served):
    limits = served.limits
    sources = calibration.calibration_sources(CLASSIFIER)[:4]

    def digest(seed: int) -> str:
        samples = calibration.make_samples(sources, 12, seed, calibration.CALIBRATION_PROFILE, limits)
        return calibration.Source("", calibration.core_inputs(samples, served).tobytes()).sha256

    assert digest(5) == digest(5)
    assert digest(5) != digest(6)


def test_augmentations_exercise_the_decoder(served):
    limits = served.limits
    samples = calibration.make_samples(calibration.calibration_sources(CLASSIFIER), 40, 3, calibration.CALIBRATION_PROFILE, limits)
    augmented = [s for s in samples if not s.transform.get("original")]
    formats = {s.transform["format"] for s in augmented}
    qualities = {s.transform["quality"] for s in augmented if s.transform["format"] == "jpeg"}
    assert "jpeg" in formats and len(qualities) > 5
    assert any(s.transform.get("flip") for s in augmented) and any("rotate" in s.transform for s in augmented)
    assert all(s.data.startswith((b"\xff\xd8\xff", b"\x89PNG")) for s in samples)


def test_calibration_set_is_saved_with_its_hash_and_reused(tmp_path, served):
    options = q.QuantizeOptions(samples=8)
    messages: list[str] = []
    first, data = q.build_calibration_set(CLASSIFIER, options, messages.append, directory=tmp_path)
    assert data.shape == (8, *served.spec.output_shape) and data.dtype == np.uint8  # the pixels the core is handed
    manifest = json.loads(first.manifest_path.read_text())
    assert manifest["sha256"] == first.sha256 == q.sha256_file(first.path)
    assert [s["source"] for s in manifest["samples"]][:3] == [s.name for s in calibration.calibration_sources(CLASSIFIER)][:3]
    second, again = q.build_calibration_set(CLASSIFIER, options, messages.append, directory=tmp_path)
    assert second == first and np.array_equal(data, again)
    assert "up to date" in messages[-1]


def test_calibration_dir_rejects_held_out_photos(tmp_path):
    from builders import photos

    for name in ("astronaut", "brick", "grass", "coffee"):
        shutil.copy(photos.photo_path(name), tmp_path / photos.photo_path(name).name)
    with pytest.raises(calibration.CalibrationError, match=r"coffee\.png \(= held-out image coffee\)"):
        calibration.calibration_sources(CLASSIFIER, tmp_path)
    (tmp_path / "coffee.png").unlink()
    with pytest.raises(calibration.CalibrationError, match="calibration needs at least 4"):
        calibration.calibration_sources(CLASSIFIER, tmp_path)


def test_held_out_photos_are_the_pipelines_own(tmp_path):
    """coffee is held out by the classifier but calibrates the segmenter: only the classifier refuses it."""
    from builders import photos

    assert "coffee" in calibration.photo_split(SEGMENTER)[0]
    for name in ("astronaut", "brick", "grass", "coffee"):
        shutil.copy(photos.photo_path(name), tmp_path / photos.photo_path(name).name)
    assert [s.name for s in calibration.calibration_sources(SEGMENTER, tmp_path)] == sorted(
        photos.photo_path(name).name for name in ("astronaut", "brick", "grass", "coffee")
    )
    with pytest.raises(calibration.CalibrationError, match=r"coffee\.png \(= held-out image coffee\)"):
        calibration.calibration_sources(CLASSIFIER, tmp_path)


# --------------------------------------------------------------------------- options and exclusions


def test_options_are_validated():
    with pytest.raises(q.BuildError, match="unknown layer group"):
        q.QuantizeOptions(exclude=("stems",))
    with pytest.raises(q.BuildError, match="not one of entropy, max"):
        q.QuantizeOptions(method="percentile")


def test_cli_reports_bad_options_in_one_line(capsys):
    assert cli.main(["quantize", "--pipeline", CLASSIFIER.name, "--exclude", "stem,bogus"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: unknown layer group(s) bogus")


def test_recipe_options_come_from_the_recipe():
    options = q.recipe_options(CLASSIFIER)
    section = CLASSIFIER.recipe.quantize
    assert options == q.QuantizeOptions(method=section.method, samples=section.samples, exclude=section.exclude)
    # The classifier's recipe keeps the measured defaults (docs/design.md, "Precision comes from the ONNX, chosen by a ladder").
    assert options == q.QuantizeOptions()
    segmenter = q.recipe_options(SEGMENTER)
    assert segmenter.samples == SEGMENTER.recipe.quantize.samples == 256 and segmenter.exclude == ()


def test_recipe_options_overrides_win_unless_none():
    options = q.recipe_options(CLASSIFIER, samples=8, method=None, exclude=(), seed=3)
    assert options.samples == 8 and options.seed == 3 and options.exclude == ()
    assert options.method == CLASSIFIER.recipe.quantize.method
    with pytest.raises(q.BuildError, match="unknown layer group"):
        q.recipe_options(CLASSIFIER, exclude=("stems",))


def test_cli_options_default_to_the_recipe():
    args = cli.build_parser().parse_args(["quantize", "--pipeline", SEGMENTER.name])
    arguments.load_one(args)
    assert args.repository == SEGMENTER.layout.repository and args.loaded == SEGMENTER
    assert q.options_from_args(args) == q.recipe_options(SEGMENTER)
    args = cli.build_parser().parse_args(["quantize", "--pipeline", SEGMENTER.name, "--samples", "16", "--exclude", "none"])
    arguments.load_one(args)
    assert q.options_from_args(args) == q.recipe_options(SEGMENTER, samples=16, exclude=())


@pytest.fixture(scope="module")
def fp32_model():
    return onnx.load(str(built_classifier().onnx("fp32")))


def test_layer_groups_on_the_default_model(fp32_model):
    groups = layer_groups.of(fp32_model)
    nodes = {node.name: node for node in fp32_model.graph.node}
    (stem,) = groups["stem"]  # it reads the image through the folded normalization (uint8 in: Cast, Sub, Div)
    assert nodes[stem].input[0] == "images_normalized" and [n.op_type for n in fp32_model.graph.node[:3]] == ["Cast", "Sub", "Div"]
    assert len(groups["depthwise"]) == 16  # EfficientNet-Lite0: one per MBConv block
    assert [nodes[name].op_type for name in groups["classifier"]] == ["Gemm"]
    assert groups["early"] == [node.name for node in fp32_model.graph.node if node.op_type == "Conv"][: layer_groups.EARLY_CONVS]


def test_the_stem_of_an_nhwc_model_is_found_through_its_layout_transpose():
    """tf2onnx's NHWC models transpose the image before the first Conv: that Conv is still the stem."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Transpose", ["images"], ["nchw"], perm=[0, 3, 1, 2], name="to_nchw"),
        helper.make_node("Conv", ["nchw", "w0"], ["c0"], name="stem_conv"),
        helper.make_node("Conv", ["c0", "w1"], ["c1"], name="next_conv"),
    ]
    graph = helper.make_graph(
        nodes,
        "nhwc",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 8, 8, 3])],
        [helper.make_tensor_value_info("c1", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(rng.normal(size=(4, 3, 1, 1)).astype(np.float32), "w0"),
            numpy_helper.from_array(rng.normal(size=(4, 4, 1, 1)).astype(np.float32), "w1"),
        ],
    )
    assert layer_groups.of(helper.make_model(graph))["stem"] == ["stem_conv"]


def test_exclusions_resolve_to_node_names(fp32_model):
    resolved = q.resolve_exclusions(fp32_model, q.QuantizeOptions(exclude=("classifier",), exclude_op_types=("GlobalAveragePool",)))
    assert resolved["nodes"] == layer_groups.of(fp32_model)["classifier"]
    with pytest.raises(q.BuildError, match="matches no node"):
        q.resolve_exclusions(fp32_model, q.QuantizeOptions(exclude_nodes=("no_such_node",)))
    with pytest.raises(q.BuildError, match="no such op"):
        q.resolve_exclusions(fp32_model, q.QuantizeOptions(exclude_op_types=("LSTM",)))


# --------------------------------------------------------------------------- the real chain


@pytest.fixture(scope="module")
def int8_repository(int8_classifier):
    """The classifier after the laddered repository's `builders all` (its recipe's options, CALIBRATION_SAMPLES)."""
    return loaded.load(int8_classifier)


def test_quantized_default_model_is_tensorrt_style_int8(int8_repository):
    path = int8_repository.layout.onnx("int8")
    model = onnx.load(str(path))
    assert q.qdq_violations(model) == []
    provenance = json.loads(path.with_name(path.name + ".json").read_text())
    assert provenance["quantizer"]["version"] == "0.47.0"
    assert provenance["quantizer"]["calibration_method"] == q.DEFAULT_METHOD
    assert provenance["calibration"]["samples"] == CALIBRATION_SAMPLES
    calibration_photos, evaluation_photos = calibration.photo_split(int8_repository)
    assert set(provenance["calibration"]["photos"]) <= set(calibration_photos)
    assert provenance["calibration"]["held_out_photos"] == list(evaluation_photos)
    assert not set(provenance["calibration"]["photos"]) & set(evaluation_photos)
    assert provenance["input_onnx"]["sha256"] == q.sha256_file(int8_repository.layout.onnx("fp32"))
    assert (
        provenance["output"]["sha256"] == q.sha256_file(path)
        and provenance["input_hashes"]["calibration"] == provenance["calibration"]["sha256"]
    )
    assert provenance["peak_rss_mb"] > 0 and provenance["calibration_seconds"] > 0
    excluded = set(provenance["quantizer"]["exclusions"]["nodes"])
    producer = {output: node.op_type for node in model.graph.node for output in node.output}
    quantized_inputs = {node.name for node in model.graph.node if any(producer.get(name) == "DequantizeLinear" for name in node.input)}
    assert excluded and not excluded & quantized_inputs


def test_quantize_is_idempotent(int8_repository):
    messages: list[str] = []
    result = q.quantize(int8_repository, q.recipe_options(int8_repository, samples=CALIBRATION_SAMPLES), log=messages.append)
    assert result.status == "up to date" and messages == [f"up to date ({q.INT8_FILENAME})"]


def test_gate_passes_on_the_reduced_calibration(int8_repository, tmp_path):
    from builders import evaluate

    report = evaluate.evaluate(int8_repository, augmented_per_photo=8, overrides=REDUCED_GATE, reports_dir=tmp_path, log=lambda _: None)
    assert report["gate"]["pass"], report["gate"]
    assert report["sets"]["raw"]["metrics"]["top1_agreement"] >= 10 / 11  # the held-out photos as shipped
    assert (tmp_path / "evaluation.md").read_text().startswith("# Precision gate of image_classifier (classification): PASS")


@pytest.mark.slow
def test_default_quantization_passes_the_gate():
    """The recipe's options (512 samples) on the real pipeline, then the default gate."""
    from builders import evaluate

    pipeline = loaded.load(built_classifier())
    result = q.quantize(pipeline, q.recipe_options(pipeline))
    assert result.provenance["calibration"]["samples"] == q.DEFAULT_SAMPLES >= 512
    report = evaluate.evaluate(pipeline, log=lambda _: None)
    assert report["gate"]["pass"] and report["sets"]["all"]["metrics"]["top1_agreement"] >= 0.95
