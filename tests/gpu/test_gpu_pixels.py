"""The GPU pixel path on a GPU: the same DALI pipeline with ``decoders.image`` on ``mixed`` (nvJPEG, the hardware
JPEG decoder where the GPU has one) and every later operator on the GPU, against the served CPU preprocess on the
parity test's uploads (tests/onnx/vision_serving/test_gpu_pixels_parity.py), within the same bounds; the pixels stay in
GPU memory (a DLPack tensor of device CUDA, what ``pb_utils.Tensor.from_dlpack`` takes), one request of several photos
is one contiguous ``[n, ...]`` tensor.

Run where DALI and a GPU are (the server image with ``requirements/image.txt``, or the dev set on a GPU host):

    ./scripts/test -m gpu tests/gpu/test_gpu_pixels.py

Skipped where ``nvidia-smi`` fails. Not yet run: the machine the project is developed on has no GPU.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from benchmarks import inprocess
from tests.onnx.vision_serving.test_gpu_pixels_parity import PIPELINES, agreement, bound, uploads
from vision_serving import layout, model_config
from vision_serving.gpu_pixels.step import GpuPreprocess, RequestPixels

pytestmark = pytest.mark.gpu
DLPACK_CUDA = 2  # DLPack's kDLCUDA
__all__ = ["uploads"]  # the parity test's fixture, used here


@pytest.fixture(scope="module", autouse=True)
def a_gpu() -> None:
    if shutil.which("nvidia-smi") is None or subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False).returncode:
        pytest.skip("no NVIDIA GPU (nvidia-smi failed)")


def host(value) -> np.ndarray:
    return np.asarray(value.as_cpu()) if hasattr(value, "as_cpu") else np.asarray(value)


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_the_gpu_pipeline_answers_as_the_served_cpu_preprocess(uploads, pipeline):
    served = inprocess.load(layout.pipeline(pipeline))
    gpu = GpuPreprocess(model_config.load_config(layout.pipeline(pipeline).model_dir("preprocess")), device="gpu", device_id=0)
    names = sorted(uploads)
    payloads = [uploads[name][0] for name in names]
    outcomes = gpu.compute([gpu.parse(np.array([data], dtype=np.object_).reshape(1, 1)) for data in payloads])
    assert all(isinstance(outcome, RequestPixels) and outcome.on_gpu for outcome in outcomes) and gpu.rebuilds == 0
    pixels = [outcome.outputs[gpu.outputs.pixels] for outcome in outcomes if isinstance(outcome, RequestPixels)]
    assert all(value.__dlpack_device__() == (DLPACK_CUDA, 0) for value in pixels)  # in GPU memory, for from_dlpack
    step = served.steps["preprocess"]
    answered = [outcome for outcome in outcomes if isinstance(outcome, RequestPixels)]
    tensors = {step.outputs[name]: np.concatenate([host(outcome.outputs[name]) for outcome in answered]) for name in answered[0].outputs}
    reference = served.postprocess(served.with_core(served.preprocessed([served.decode(data) for data in payloads]))).outputs()
    scores = agreement(pipeline, served.postprocess(served.with_core(tensors)).outputs(), reference, names)
    print(f"{pipeline} on the GPU: " + ", ".join(f"{name} {score:.4f}" for name, score in scores.items()))
    assert {name: score for name, score in scores.items() if score < bound(pipeline, name, uploads[name][1])} == {}


def test_a_request_of_several_photos_is_one_contiguous_gpu_tensor(uploads):
    config = model_config.load_config(layout.pipeline("face_detector").model_dir("preprocess"))
    gpu = GpuPreprocess(config, device="gpu", device_id=0)
    payloads = [uploads[name][0] for name in sorted(uploads)[:3]]
    (outcome,) = gpu.compute([gpu.parse(np.array(payloads, dtype=np.object_).reshape(-1, 1))])
    assert isinstance(outcome, RequestPixels) and outcome.on_gpu
    pixels = outcome.outputs[gpu.outputs.pixels]
    assert pixels.__dlpack_device__() == (DLPACK_CUDA, 0) and host(pixels).shape[0] == 3
