"""A depth and a semantic segmentation model brought as a user brings them, served by a real tritonserver and read by
every consumer.

The tests' YOLO26n-depth (tests/support/yolo_depth.py) and YOLO26n-sem (tests/support/yolo_semantic.py) are brought
into a model repository of their own (``new-pipeline --from yolo``, ``export``, ``check``) and served together by
``./scripts/serve``. Their answers over gRPC (several photos of different sizes in one request; for depth,
``FLOAT_DEPTH`` set for some) equal the in-process pipelines' maps; the command-line clients (``./scripts/depth``,
``./scripts/semantic``) write the maps; the gateway's JSON carries the same maps and validates against each pipeline's
answer schema in its OpenAPI document; the page draws them over the photo; a ``FLOAT_DEPTH`` of the wrong datatype is
``INVALID_ARG`` and the server keeps serving.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.test_gateway_page import browser, upload  # noqa: F401 (the browser fixture)
from tests.support import serve_script, yolo_exports, yolo_semantic
from tests.support import yolo_depth as scenes
from tests.support.gateway import GatewayProcess, multipart, request
from vision_serving import layout
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline
from vision_serving.tasks import depth, semantic_segmentation

pytestmark = pytest.mark.integration

NAME = "my_depth"
SEMANTIC = "my_rooms"


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("downloads")
    depth_file = Path(shutil.copy(scenes.trained() / "static.onnx", folder / f"{NAME}.onnx"))
    semantic_file = Path(shutil.copy(yolo_semantic.trained() / "wide.onnx", folder / f"{SEMANTIC}.onnx"))
    repository = tmp_path_factory.mktemp("dense") / "model_repository"
    repository.mkdir()
    yolo_exports.bring({NAME: depth_file, SEMANTIC: semantic_file}, repository)
    return repository


@pytest.fixture(scope="module")
def server(repository, tmp_path_factory) -> Iterator[dict[str, str]]:
    with serve_script.serving(repository, [NAME, SEMANTIC], tmp_path_factory.mktemp("serve") / "serve.log") as served:
        yield served


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> dict[str, bytes]:
    return scenes.new_scenes(tmp_path_factory.mktemp("scenes"), 3, seed=21)


@pytest.fixture(scope="module")
def semantic_photos(tmp_path_factory) -> dict[str, bytes]:
    return yolo_semantic.new_scenes(tmp_path_factory.mktemp("semantic_scenes"), 3, seed=22)


@pytest.fixture(scope="module")
def expected_classes(repository, semantic_photos) -> dict[str, np.ndarray]:
    """The in-process semantic pipeline's full-size class maps."""
    served = ServedPipeline.load(PipelineConfigs.load(layout.pipeline(SEMANTIC, repository)), "cpu")
    names = sorted(semantic_photos)
    return dict(zip(names, served.run([semantic_photos[name] for name in names]).maps()))


@pytest.fixture(scope="module")
def expected(repository, photos) -> dict[str, np.ndarray]:
    """The in-process pipeline's full-size maps (the CPU core, as the server runs it)."""
    served = ServedPipeline.load(PipelineConfigs.load(layout.pipeline(NAME, repository)), "cpu")
    names = sorted(photos)
    return dict(zip(names, served.run([photos[name] for name in names]).maps()))


def infer(server, images: list[bytes], floats: np.ndarray | None = None, pipeline: str = NAME) -> grpcclient.InferResult:
    client = grpcclient.InferenceServerClient(server["grpc"])
    image = grpcclient.InferInput("IMAGE", [len(images), 1], "BYTES")
    image.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(-1, 1))
    inputs = [image]
    if floats is not None:
        wanted = grpcclient.InferInput("FLOAT_DEPTH", list(floats.shape), "BOOL" if floats.dtype == np.bool_ else "INT32")
        wanted.set_data_from_numpy(floats)
        inputs.append(wanted)
    return client.infer(pipeline, inputs)


def test_grpc_answers_the_maps_of_the_in_process_pipeline(server, photos, expected):
    names = sorted(photos)
    result = infer(server, [photos[name] for name in names], np.array([[True], [False], [True]]))
    pngs, raws = result.as_numpy("DEPTH_PNG").reshape(-1), result.as_numpy("DEPTH_FLOAT32").reshape(-1)
    ranges, scales = result.as_numpy("DEPTH_RANGE"), result.as_numpy("DEPTH_SCALE").reshape(-1)
    assert scales.tolist() == [depth.DEPTH_SCALE] * 3
    for index, name in enumerate(names):
        want = expected[name]
        from_png = depth.decode_png(bytes(pngs[index]), depth.DEPTH_SCALE)
        assert from_png.shape == want.shape and np.abs(from_png - want).max() <= 0.5 / depth.DEPTH_SCALE + 1e-4
        assert ranges[index].tolist() == pytest.approx([want.min(), want.max()], rel=1e-6)
        if index == 1:
            assert bytes(raws[index]) == b""
        else:
            assert np.array_equal(depth.decode_float32(bytes(raws[index]), *want.shape), want)


def test_a_float_depth_of_the_wrong_datatype_is_invalid_arg_and_the_server_keeps_serving(server, photos):
    name = sorted(photos)[0]
    with pytest.raises(InferenceServerException) as raised:
        infer(server, [photos[name]], np.array([[1]], np.int32))
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT" and "FLOAT_DEPTH" in raised.value.message()
    assert infer(server, [photos[name]]).as_numpy("DEPTH_PNG").shape == (1, 1)


def test_the_command_line_client_writes_the_png_and_the_float_map(server, photos, expected, tmp_path):
    name = sorted(photos)[0]
    (tmp_path / name).write_bytes(photos[name])
    out = tmp_path / "out"
    command = [str(layout.REPOSITORY_ROOT / "scripts" / "depth"), "--model", NAME, "--url", server["grpc"], "--out-dir", str(out)]
    done = subprocess.run([*command, "--float", "--overlay", "--json", str(tmp_path / name)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (record,) = json.loads(done.stdout)
    stem = Path(name).stem
    assert record["depth_file"] == str(out / f"{stem}{depth.DEPTH_SUFFIX}") and record["depth_scale"] == depth.DEPTH_SCALE
    assert np.array_equal(np.load(out / f"{stem}.depth.npy"), expected[name])
    assert (out / f"{stem}.depth.jpg").stat().st_size > 0
    png = depth.decode_png((out / f"{stem}{depth.DEPTH_SUFFIX}").read_bytes(), depth.DEPTH_SCALE)
    assert np.abs(png - expected[name]).max() <= 0.5 / depth.DEPTH_SCALE + 1e-4


@pytest.fixture(scope="module")
def own_gateway(server, tmp_path_factory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(server["grpc"], log_file=tmp_path_factory.mktemp("gateway") / "gateway.log")
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_the_gateway_answers_the_map_as_its_schema_says(own_gateway, photos, expected):
    name = sorted(photos)[2]
    body, headers = multipart({"float_depth": "true"}, photos[name])
    status, answer = request(f"{own_gateway.url}/v1/pipelines/{NAME}", body, headers)
    assert status == 200, answer
    status, document = request(f"{own_gateway.url}/openapi.json")
    assert status == 200
    jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{NAME}.answer", "components": document["components"]}).validate(answer)
    found, want = answer["depth"], expected[name]
    assert (found["height"], found["width"]) == want.shape and found["range"] == pytest.approx([want.min(), want.max()], rel=1e-6)
    assert np.array_equal(depth.decode_float32(base64.b64decode(found["float32"]), *want.shape), want)
    body, headers = multipart({}, photos[name])
    status, plain = request(f"{own_gateway.url}/v1/pipelines/{NAME}", body, headers)
    assert status == 200 and "float32" not in plain["depth"] and plain["depth"]["png"] == found["png"]


def test_the_page_draws_the_map_over_the_photo(browser, own_gateway, photos, expected, tmp_path):  # noqa: F811
    name = sorted(photos)[1]
    path = tmp_path / name
    path.write_bytes(photos[name])
    drawn = upload(browser, own_gateway, NAME, path)
    want = expected[name]
    assert (drawn["depth"]["height"], drawn["depth"]["width"]) == want.shape
    assert [drawn["depth"]["low"], drawn["depth"]["high"]] == pytest.approx([want.min(), want.max()], rel=1e-6)


def test_semantic_class_maps_over_grpc_the_client_the_gateway_and_the_page(
    server,
    own_gateway,
    browser,  # noqa: F811
    semantic_photos,
    expected_classes,
    tmp_path,
):
    names = sorted(semantic_photos)
    result = infer(server, [semantic_photos[name] for name in names], pipeline=SEMANTIC)
    for index, name in enumerate(names):
        want = expected_classes[name]
        assert np.array_equal(semantic_segmentation.decode_png(bytes(result.as_numpy("CLASS_MAP")[index, 0])), want)
        count = int(result.as_numpy("COUNT")[index, 0])
        assert sorted(result.as_numpy("CLASS_IDS")[index, :count].tolist()) == np.unique(want).tolist()
    name = names[0]
    (tmp_path / name).write_bytes(semantic_photos[name])
    command = [
        str(layout.REPOSITORY_ROOT / "scripts" / "semantic"),
        "--model",
        SEMANTIC,
        "--url",
        server["grpc"],
        "--out-dir",
        str(tmp_path),
    ]
    done = subprocess.run([*command, "--overlay", "--json", str(tmp_path / name)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (record,) = json.loads(done.stdout)
    written = semantic_segmentation.decode_png(Path(record["class_map_file"]).read_bytes())
    assert np.array_equal(written, expected_classes[name])
    body, headers = multipart({}, semantic_photos[name])
    status, answer = request(f"{own_gateway.url}/v1/pipelines/{SEMANTIC}", body, headers)
    assert status == 200, answer
    status, document = request(f"{own_gateway.url}/openapi.json")
    schema = {"$ref": f"#/components/schemas/{SEMANTIC}.answer", "components": document["components"]}
    jsonschema.Draft202012Validator(schema).validate(answer)
    assert answer["classes"] == record["classes"] or [c["class_id"] for c in answer["classes"]] == [
        c["class_id"] for c in record["classes"]
    ]
    assert np.array_equal(semantic_segmentation.decode_png(base64.b64decode(answer["class_map"]["png"])), expected_classes[name])
    drawn = upload(browser, own_gateway, SEMANTIC, tmp_path / name)
    want = expected_classes[name]
    assert (drawn["classMap"]["height"], drawn["classMap"]["width"]) == want.shape
    assert drawn["classMap"]["tinted"] == [int(c) for c in np.unique(want) if c != 0]
    assert drawn["classes"] == [c["label"] for c in answer["classes"]]
