"""A pipeline whose spec puts its pixels on the GPU (``pixel_device = "gpu"``) still serves on a server without one:
its generated repository, started by ``./scripts/serve`` (the CPU variants, ``--model-config-name=cpu``), loads the
preprocess's ``configs/cpu.pbtxt`` through the GPU preprocess's ``1/model.py``, a KIND_CPU model without the mode's
parameters, and answers as the shipped pipeline in process; a bad upload is INVALID_ARGUMENT naming the problem."""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from builders import cli, photos
from tests.support import serve_script
from vision_serving import layout
from vision_serving.pipeline_configs import PipelineConfigs
from vision_serving.served import ServedPipeline

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # its own server (about 40 s); the mode is off in the shipped pipelines

ROOT = layout.REPOSITORY_ROOT
FACES = layout.pipeline("face_detector")
PHOTOS = ("astronaut", "chelsea", "coffee")


@pytest.fixture(scope="module")
def server(built_repository, tmp_path_factory) -> Iterator[str]:
    repository = tmp_path_factory.mktemp("gpu_pixels")
    shutil.copytree(FACES.repository, repository / FACES.name, ignore=shutil.ignore_patterns("__pycache__"))
    recipe = layout.pipeline(FACES.name, repository).recipe
    recipe.write_text(recipe.read_text().replace("[preprocess]\n", '[preprocess]\npixel_device = "gpu"\n', 1))
    assert cli.main(["configs", "--pipeline", FACES.name, "--model-repository", str(repository)]) == 0
    with serve_script.serving(repository, [FACES.name], repository / "serve.log") as served:
        yield f"{served['grpc']}|{served['http']}|{served['log']}"


def infer(url: str, payloads: list[bytes]) -> dict[str, np.ndarray]:
    client = grpcclient.InferenceServerClient(url)
    image = grpcclient.InferInput("IMAGE", [len(payloads), 1], "BYTES")
    image.set_data_from_numpy(np.array(payloads, dtype=np.object_).reshape(-1, 1))
    result = client.infer(FACES.name, [image])
    return {name: result.as_numpy(name) for name in ("BOXES", "COUNT")}


def test_the_cpu_variant_is_served_and_answers_as_the_shipped_pipeline(server):
    grpc_url, http_url, log = server.split("|")
    name = FACES.model_name("preprocess")
    with urllib.request.urlopen(f"http://{http_url}/v2/models/{name}/config", timeout=10) as response:
        config = json.loads(response.read())
    assert [group["kind"] for group in config["instance_group"]] == ["KIND_CPU"] and "pixel_device" not in config.get("parameters", {})
    assert "pixels on GPU" not in Path(log).read_text()
    served = ServedPipeline.load(PipelineConfigs.load(FACES))
    for photo in PHOTOS:
        data = photos.photo_bytes(photo)
        got, expected = infer(grpc_url, [data]), served.run([data]).outputs()
        assert got["COUNT"].tolist() == expected["COUNT"].tolist(), photo
        np.testing.assert_allclose(got["BOXES"], expected["BOXES"], atol=1e-3, err_msg=photo)
    with pytest.raises(InferenceServerException, match="unrecognized image format") as error:
        infer(grpc_url, [b"not an image at all, just some bytes"])
    assert "INVALID_ARG" in str(error.value.status())
