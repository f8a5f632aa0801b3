"""The accuracy gate: metrics, reports, exit codes, and the INT8 ensemble served with --model-config-name=cpu_int8."""

from __future__ import annotations

import json

import numpy as np
import pytest

from builders import BuildError, calibration, cli, evaluate, loaded
from builders import quantize as q
from devtools.loadgen import free_port
from tests.support.pipelines import REDUCED_GATE, built_classifier, int8_test_repository
from vision_serving import layout, model_config
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline

CLASSIFIER = layout.pipeline("image_classifier")
GOLDEN = {
    "chelsea": {"tiger cat", "Egyptian cat", "tabby"},
    "coffee": {"espresso"},
    "camera": {"tripod"},
}


def test_golden_labels_are_the_recipes():
    assert {name: set(labels) for name, labels in loaded.load(CLASSIFIER).recipe.golden.items()} == GOLDEN


def test_evaluation_set_is_held_out_and_deterministic():
    pipeline = loaded.load(CLASSIFIER)
    calibration_photos, evaluation_photos = calibration.photo_split(pipeline)
    first = evaluate.evaluation_set(pipeline, augmented_per_photo=2)
    again = evaluate.evaluation_set(pipeline, augmented_per_photo=2)
    assert [s.data for s in first.all] == [s.data for s in again.all]
    assert {s.source for s in first.all} <= set(evaluation_photos)
    assert not {s.source for s in first.all} & set(calibration_photos)
    assert len(first.raw) == len(calibration.evaluation_sources(pipeline)) and len(first.augmented) == 2 * len(first.raw)
    assert all(s.transform.get("original") for s in first.raw) and not any(s.transform.get("original") for s in first.augmented)
    # Different transforms and seed from calibration: no augmented evaluation image equals a calibration one.
    calibration_bytes = {
        s.data
        for s in calibration.make_samples(
            calibration.calibration_sources(pipeline),
            48,
            calibration.CALIBRATION_SEED,
            calibration.CALIBRATION_PROFILE,
            pipeline.configs.limits,
        )
    }
    assert not calibration_bytes & {s.data for s in first.all}


def test_gate_overrides_are_key_value_numbers():
    assert evaluate.gate_overrides(["min_top1=0.9", "min_cosine=0.5"]) == {"min_top1": 0.9, "min_cosine": 0.5}
    with pytest.raises(BuildError, match="expected KEY=NUMBER"):
        evaluate.gate_overrides(["min_top1"])


@pytest.fixture(scope="module")
def classifier() -> layout.Pipeline:
    return built_classifier()


def test_fp32_against_itself_passes_and_reports(classifier, tmp_path):
    pipeline = loaded.load(classifier)
    fp32 = classifier.onnx("fp32")
    report = evaluate.evaluate(pipeline, candidate=fp32, augmented_per_photo=1, reports_dir=tmp_path, log=lambda _: None)
    assert report["gate"]["pass"] and report["task"] == "classification"
    assert report["sets"]["all"]["metrics"]["top1_agreement"] == 1.0
    assert set(report["sets"]) == {"raw", "all"} and set(report["gate"]["checks"]) == {"top1_agreement", "top5_overlap", "cosine_mean"}
    saved = json.loads((tmp_path / "evaluation.json").read_text())
    assert saved["gate"] == report["gate"] and len(saved["evaluation_set"]["photos"]) == len(calibration.evaluation_sources(pipeline))
    assert saved["evaluation_set"]["calibration_photos_excluded"] == list(calibration.photo_split(pipeline)[0])
    assert "| all | top1_agreement | 1.0000 |" in (tmp_path / "evaluation.md").read_text()


def test_failed_gate_exits_1_with_a_report(classifier, tmp_path, capsys):
    fp32 = str(classifier.onnx("fp32"))
    argv = ["evaluate", "--pipeline", classifier.name, "--candidate", fp32, "--augmented-per-photo", "0", "--gate", "min_top1=1.01"]
    assert cli.main([*argv, "--reports-dir", str(tmp_path)]) == 1
    assert "error: the precision gate failed on 11 held-out images: top1_agreement 1.0000 < 1.01" in capsys.readouterr().err
    assert (tmp_path / "evaluation.md").read_text().startswith("# Precision gate of image_classifier (classification): FAIL")
    assert cli.main([*argv[:-1], "min_iou=1", "--reports-dir", str(tmp_path)]) == 2
    assert "--gate: unknown key(s) min_iou; this task's gate has min_cosine, min_top1, min_top5" in capsys.readouterr().err


def test_missing_int8_model_is_a_usage_error(tmp_path, capsys):
    argv = ["evaluate", "--pipeline", CLASSIFIER.name, "--candidate", str(tmp_path / "missing.onnx"), "--reports-dir", str(tmp_path)]
    assert cli.main(argv) == 2
    assert "run `python -m builders quantize` first" in capsys.readouterr().err


# --------------------------------------------------------------------------- served INT8 (integration)


@pytest.fixture(scope="module")
def int8_server(built_repository, tmp_path_factory):
    """tritonserver with --model-config-name=cpu_int8: core from configs/cpu_int8.pbtxt, the rest from config.pbtxt.

    Yields the server and the served copy of the image_classifier pipeline (a layout.Pipeline)."""
    from devtools.triton_server import LocalTritonServer

    pipeline = int8_test_repository(built_repository)
    log_file = tmp_path_factory.mktemp("triton-int8") / "tritonserver.log"
    server = LocalTritonServer(
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        config_name="cpu_int8",
        model_repository=pipeline.repository.parent,
        log_file=log_file,
    )
    server.start()
    try:
        server.wait_ready(timeout_s=240)
        yield server, pipeline
    finally:
        server.stop()


def _infer(server, images: list[bytes]):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    image_input = grpcclient.InferInput("IMAGE", [len(images), 1], "BYTES")
    image_input.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(-1, 1))
    result = client.infer(CLASSIFIER.name, [image_input])
    return result.as_numpy("LABELS"), result.as_numpy("SCORES"), result.as_numpy("CLASS_IDS")


@pytest.mark.integration
def test_config_name_selects_int8_core_and_falls_back_for_the_rest(int8_server):
    import tritonclient.grpc as grpcclient

    server, pipeline = int8_server
    client = grpcclient.InferenceServerClient(server.grpc_url)
    core = client.get_model_config(pipeline.model_name("core"), as_json=True)["config"]
    assert core["parameters"]["onnx_file"]["string_value"] == q.INT8_FILENAME
    assert core["parameters"]["graph_optimization"]["string_value"] == "disable_all"
    # No configs/cpu_int8.pbtxt in these models: Triton 2.51 loaded their config.pbtxt.
    for folder in (pipeline.model_dir("preprocess"), pipeline.model_dir("postprocess"), pipeline.ensemble_dir):
        name = folder.name
        assert not (folder / "configs" / "cpu_int8.pbtxt").exists()
        assert client.is_model_ready(name)
        served = client.get_model_config(name, as_json=True)["config"]
        expected = model_config.load_config(folder)
        assert served["name"] == expected.name and int(served.get("max_batch_size", 0)) == expected.max_batch_size
    preprocess = client.get_model_config(pipeline.model_name("preprocess"), as_json=True)["config"]
    assert preprocess["parameters"]["resize_shorter_side"]["string_value"] == "256"


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_int8_ensemble_keeps_the_golden_labels(int8_server, photo_bytes, name):
    labels, scores, _ = _infer(int8_server[0], [photo_bytes[name]])
    assert labels[0, 0].decode() in GOLDEN[name], labels[0].tolist()
    assert np.all(np.diff(scores[0]) <= 0)


@pytest.mark.integration
def test_served_scores_are_the_int8_models(int8_server, photo_bytes):
    """What the server answers is the INT8 model's output (Q/DQ emulation), not the FP32 model's."""
    server, pipeline = int8_server
    names = ["chelsea", "coffee", "camera", "astronaut"]
    _, scores, class_ids = _infer(server, [photo_bytes[n] for n in names])
    configs = PipelineConfigs.load(pipeline)
    expected = {
        variant: ServedPipeline.load(configs, variant).run([photo_bytes[n] for n in names]).outputs() for variant in ("cpu_int8", "cpu")
    }
    np.testing.assert_array_equal(class_ids, expected["cpu_int8"]["CLASS_IDS"])
    np.testing.assert_allclose(scores, expected["cpu_int8"]["SCORES"], atol=1e-4)
    differences = [np.abs(scores[row] - expected["cpu"]["SCORES"][row]).max() for row in range(len(names))]
    assert max(differences) > 1e-3  # the FP32 core would have answered differently


@pytest.mark.integration
def test_gate_through_the_served_ensemble(int8_server, tmp_path):
    server, pipeline = int8_server
    report = evaluate.evaluate(
        loaded.load(pipeline),
        server_url=server.grpc_url,
        augmented_per_photo=4,
        overrides=REDUCED_GATE,  # the reduced calibration's model, as in test_quantize
        reports_dir=tmp_path,
        log=lambda _: None,
    )
    assert report["mode"] == "server" and report["gate"]["pass"], report["gate"]
    assert "cosine_mean" not in report["gate"]["checks"]  # a served response has no logits
    assert (tmp_path / "evaluation_server.md").is_file()
