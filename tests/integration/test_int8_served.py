"""The INT8 ensemble served with --model-config-name=cpu_int8 on a real tritonserver: the config name
selects the INT8 core and falls back to config.pbtxt for the rest, the answers are the INT8 model's,
and the accuracy gate runs through the served ensemble."""

from __future__ import annotations

import numpy as np
import pytest

from builders import evaluate, loaded
from builders import quantize as q
from devtools.loadgen import free_port
from tests.support.pipelines import REDUCED_GATE
from vision_serving import layout, model_config
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline

CLASSIFIER = layout.pipeline("image_classifier")
GOLDEN = {
    "chelsea": {"tiger cat", "Egyptian cat", "tabby"},
    "coffee": {"espresso"},
    "camera": {"tripod"},
}


@pytest.fixture(scope="module")
def int8_server(int8_classifier, tmp_path_factory):
    """tritonserver with --model-config-name=cpu_int8: core from configs/cpu_int8.pbtxt, the rest from config.pbtxt.

    Yields the server and the served copy of the image_classifier pipeline (a layout.Pipeline)."""
    from devtools.triton_server import LocalTritonServer

    pipeline = int8_classifier
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
