"""The image_classifier ensemble on a real tritonserver (started by the `triton_server` fixture)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline

pytestmark = pytest.mark.integration

MODEL = "image_classifier"
GOLDEN = {
    "chelsea": {"tiger cat", "Egyptian cat", "tabby"},
    "coffee": {"espresso"},
    "camera": {"tripod"},
}
CLIENTS = {"grpc": grpcclient, "http": httpclient}


def make_client(server, protocol: str):
    module = CLIENTS[protocol]
    return module.InferenceServerClient(server.grpc_url if protocol == "grpc" else server.http_url)


def infer(client, module, images: list[bytes], top_k: int | None = None):
    image_input = module.InferInput("IMAGE", [len(images), 1], "BYTES")
    image_input.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(-1, 1))
    inputs = [image_input]
    if top_k is not None:
        k_input = module.InferInput("TOP_K", [len(images), 1], "INT32")
        k_input.set_data_from_numpy(np.full((len(images), 1), top_k, dtype=np.int32))
        inputs.append(k_input)
    result = client.infer(MODEL, inputs)
    return result.as_numpy("LABELS"), result.as_numpy("SCORES"), result.as_numpy("CLASS_IDS")


def is_invalid_argument(error: InferenceServerException) -> bool:
    return str(error.status()) in ("StatusCode.INVALID_ARGUMENT", "400")


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_labels(triton_server, photo_bytes, protocol, name):
    labels, scores, class_ids = infer(make_client(triton_server, protocol), CLIENTS[protocol], [photo_bytes[name]])
    assert labels.shape == scores.shape == class_ids.shape == (1, 5)
    assert labels[0, 0].decode() in GOLDEN[name], labels[0].tolist()
    assert np.all(np.diff(scores[0]) <= 0) and 0 < scores[0].sum() <= 1.0 + 1e-5


@pytest.mark.parametrize("sizing", ["this machine", "16 CPUs: decode threads"])
def test_served_equals_in_process_pipeline(request, sizing, built_repository, photo_bytes):
    """What the server answers is what the same library computes in-process."""
    server = request.getfixturevalue("triton_server" if sizing == "this machine" else "threaded_server")
    names = ["chelsea", "coffee", "camera", "astronaut"]
    _labels, scores, class_ids = infer(make_client(server, "grpc"), grpcclient, [photo_bytes[n] for n in names])

    # The served pipeline in process: the same decoder, preprocessing, core config (cpu) and postprocessing.
    served = ServedPipeline.load(PipelineConfigs.at(built_repository / MODEL), "cpu")
    expected = served.run([photo_bytes[n] for n in names]).outputs()
    assert class_ids.tolist() == expected["CLASS_IDS"].tolist()
    np.testing.assert_allclose(scores, expected["SCORES"], atol=1e-5)


def test_one_request_with_several_images(triton_server, photo_bytes):
    images = [photo_bytes["coffee"], photo_bytes["chelsea"], photo_bytes["coffee"]]
    labels, _, _ = infer(make_client(triton_server, "grpc"), grpcclient, images)
    assert labels.shape == (3, 5)
    assert labels[0, 0] == labels[2, 0] == b"espresso"
    assert labels[1, 0].decode() in GOLDEN["chelsea"]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_top_k_override(triton_server, photo_bytes, protocol):
    client, module = make_client(triton_server, protocol), CLIENTS[protocol]
    labels, scores, class_ids = infer(client, module, [photo_bytes["coffee"]], top_k=3)
    assert labels.shape == scores.shape == class_ids.shape == (1, 3)
    with pytest.raises(InferenceServerException, match="TOP_K must be between 1 and 1000, got 0") as error:
        infer(client, module, [photo_bytes["coffee"]], top_k=0)
    assert is_invalid_argument(error.value)


BAD_PAYLOADS = {
    "empty": (b"", "empty image payload"),
    "text": (b"this is not an image", "unrecognized image format"),
    "truncated_png": (None, "truncated PNG"),
    "bomb": (None, "over the limit of"),
}


def bad_payload(kind: str, photo_bytes) -> bytes:
    if kind == "truncated_png":
        return photo_bytes["chelsea"][:20000]
    if kind == "bomb":
        from tests.support.images import png_with_declared_size

        return png_with_declared_size(100_000, 100_000)
    return BAD_PAYLOADS[kind][0]


@pytest.fixture(scope="module")
def threaded_server(built_repository, tmp_path_factory):
    """The classifier sized for 16 CPUs: 8 preprocess instances of 2 decode threads, so the requests
    of a batch are decoded in a thread pool (on this 2-CPU machine too: correctness, not speed)."""
    from devtools.loadgen import running_server

    with running_server(built_repository, tmp_path_factory.mktemp("threaded"), pipelines=[MODEL], cpus=16) as server:
        assert str(server.step_layouts[f"{MODEL}_preprocess"]) == "8 instance(s) x 2 decode thread(s)"
        yield server


@pytest.mark.parametrize("sizing", ["this machine", "16 CPUs: decode threads"])
def test_batch_mixing_good_and_bad_images(request, sizing, photo_bytes):
    """Concurrent requests share dynamic batches; each bad one fails alone, clearly, the rest succeed,
    whether a preprocess instance decodes its batch in order or in a pool of threads."""
    server = request.getfixturevalue("triton_server" if sizing == "this machine" else "threaded_server")
    client = make_client(server, "grpc")
    work = [("good", photo_bytes["chelsea"]), ("good", photo_bytes["coffee"])]
    work += [(kind, bad_payload(kind, photo_bytes)) for kind in BAD_PAYLOADS]
    work = work * 4  # 24 requests in flight at once

    def call(item):
        kind, payload = item
        try:
            return kind, infer(client, grpcclient, [payload])[0][0, 0].decode()
        except InferenceServerException as error:
            return kind, error

    with ThreadPoolExecutor(max_workers=len(work)) as pool:
        results = list(pool.map(call, work))
    for kind, outcome in results:
        if kind == "good":
            assert isinstance(outcome, str) and outcome in GOLDEN["chelsea"] | {"espresso"}
        else:
            assert isinstance(outcome, InferenceServerException), f"{kind} was accepted"
            assert is_invalid_argument(outcome), (kind, outcome.status(), outcome.message())
            assert BAD_PAYLOADS[kind][1] in outcome.message(), outcome.message()
    # Some bad requests must have shared a batch with good ones for this test to mean anything.
    stats = client.get_inference_statistics("image_classifier_preprocess", as_json=True)["model_stats"][0]
    assert int(stats["execution_count"]) < int(stats["inference_count"]) + len(work)


def test_bad_image_inside_a_multi_image_request_names_its_index(triton_server, photo_bytes):
    with pytest.raises(InferenceServerException, match="image 1 of 3: empty image payload"):
        infer(make_client(triton_server, "http"), httpclient, [photo_bytes["coffee"], b"", photo_bytes["coffee"]])


def test_server_ready_and_correct_after_bad_inputs(triton_server, photo_bytes):
    client = make_client(triton_server, "grpc")
    for kind in BAD_PAYLOADS:
        with pytest.raises(InferenceServerException):
            infer(client, grpcclient, [bad_payload(kind, photo_bytes)])
    assert client.is_server_ready() and client.is_model_ready(MODEL)
    labels, _, _ = infer(client, grpcclient, [photo_bytes["camera"]])
    assert labels[0, 0] == b"tripod"


def test_batch_over_max_batch_size_is_rejected(triton_server, photo_bytes):
    client = make_client(triton_server, "grpc")
    max_batch = client.get_model_config(MODEL, as_json=True)["config"]["max_batch_size"]
    with pytest.raises(InferenceServerException, match=f"batch-size must be <= {max_batch}") as error:
        infer(client, grpcclient, [photo_bytes["coffee"]] * (int(max_batch) + 1))
    assert is_invalid_argument(error.value)
    assert client.is_server_ready()


def test_the_server_runs_each_preprocess_sized_to_its_cpus(triton_server, built_repository):
    """What Triton loaded (its model config API) is the sizing of this machine's CPUs: instances and decode threads."""
    from vision_serving import cpu_sizing, layout, model_config

    client = httpclient.InferenceServerClient(triton_server.http_url)
    cpus = cpu_sizing.cpu_limit().cpus
    for pipeline in layout.pipelines(built_repository):
        for step in ("preprocess", "postprocess"):
            shipped = model_config.load_config(pipeline.model_dir(step))
            expected = cpu_sizing.layout_for(shipped, cpus, pipeline.model_dir(step))
            assert expected is not None, f"{pipeline.name}: its {step} has no cpu_share"
            served = client.get_model_config(pipeline.model_name(step))
            assert [group["count"] for group in served["instance_group"]] == [expected.instances]
            if expected.threaded:
                assert served["parameters"]["decode_threads"]["string_value"] == str(expected.threads)
