"""vision_serving.gpu_pixels.step on DALI's CPU operators: what stays on the CPU keeps its behaviour. A bad upload
fails its own request with the served error; a format the GPU decoder does not take is decoded by the served CPU
code (the served tensors exactly); a JPEG DALI refuses (the checks read the structure, not the coded data) sends its run to the CPU path, where it
alone fails and its batch neighbours are answered; a request of several photos is one ``[n, ...]`` tensor."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image

from vision_serving import image_codec, layout, model_config, preprocessing
from vision_serving.gpu_pixels.step import GpuPreprocess, RequestPixels
from vision_serving.image_codec import ImageError

pytestmark = pytest.mark.onnx

FACES = layout.pipeline("face_detector")


@pytest.fixture(scope="module")
def gpu() -> GpuPreprocess:
    return GpuPreprocess(model_config.load_config(FACES.model_dir("preprocess")), device="cpu", device_id=None)


def photo(width: int = 320, height: int = 240, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x, y = np.meshgrid(np.linspace(0, 255, width), np.linspace(0, 255, height))
    image = np.dstack([x, y, 255 - x]) + rng.normal(0, 8, (height, width, 3))
    return np.clip(image, 0, 255).astype(np.uint8)


def jpeg(image: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(image).save(out, "JPEG", quality=90)
    return out.getvalue()


def request(*uploads: bytes) -> np.ndarray:
    return np.array(list(uploads), dtype=np.object_).reshape(-1, 1)


def served(gpu: GpuPreprocess, *uploads: bytes) -> dict[str, np.ndarray]:
    decoded = [image_codec.decode(data, gpu.limits, gpu.minimum) for data in uploads]
    return preprocessing.preprocess_outputs(decoded, gpu.spec, gpu.outputs)


def undefined_table(data: bytes) -> bytes:
    """The scan's first component reads Huffman tables 3 (none defined): the structure checks pass, decoders refuse it."""
    body = bytearray(data)
    body[data.index(b"\xff\xda") + 6] = 0x33
    return bytes(body)


def test_a_bad_upload_fails_alone_with_the_served_error(gpu):
    with pytest.raises(ImageError) as served_error:
        image_codec.check(b"GIF89a" + bytes(64), gpu.limits)
    with pytest.raises(ImageError) as error:
        gpu.parse(request(b"GIF89a" + bytes(64)))
    assert str(error.value) == str(served_error.value)
    with pytest.raises(ImageError, match=r"^image 1 of 2: "):
        gpu.parse(request(jpeg(photo()), b"\x89PNG\r\n\x1a\n" + bytes(8)))


def test_a_png_takes_the_served_cpu_path(gpu):
    png = cv2.imencode(".png", photo())[1].tobytes()
    parsed = gpu.parse(request(png))
    assert parsed.plans is None and parsed.cpu is not None
    (outcome,) = gpu.compute([parsed])
    assert isinstance(outcome, RequestPixels) and not outcome.on_gpu
    for name, value in served(gpu, png).items():
        np.testing.assert_array_equal(outcome.outputs[name], value)


def test_a_jpeg_dali_refuses_fails_alone_and_its_run_is_answered_by_the_cpu(gpu):
    good, other = jpeg(photo()), jpeg(photo(seed=1))
    bad = undefined_table(jpeg(photo(seed=2)))
    image_codec.check(bad, gpu.limits)  # the structure checks pass
    parsed = [gpu.parse(request(data)) for data in (good, bad, other)]
    assert all(item.plans is not None for item in parsed)
    before = gpu.rebuilds
    outcomes = gpu.compute(parsed)
    assert gpu.rebuilds == before + 1
    assert isinstance(outcomes[1], ImageError) and "Huffman table 0x03 was not defined" in str(outcomes[1])
    for data, outcome in ((good, outcomes[0]), (other, outcomes[2])):
        assert isinstance(outcome, RequestPixels)
        for name, value in served(gpu, data).items():  # the CPU path: the served tensors exactly
            np.testing.assert_array_equal(outcome.outputs[name], value)
    (again,) = gpu.compute([gpu.parse(request(good))])  # the rebuilt pipeline serves the next batch
    assert isinstance(again, RequestPixels) and gpu.rebuilds == before + 1


def test_a_request_of_several_photos_is_one_tensor_with_its_sizes(gpu):
    uploads = [jpeg(photo(320, 240)), jpeg(photo(200, 300, seed=3))]
    single = jpeg(photo(seed=4))
    outcomes = gpu.compute([gpu.parse(request(*uploads)), gpu.parse(request(single))])
    assert all(isinstance(outcome, RequestPixels) for outcome in outcomes)
    several, one = outcomes
    assert isinstance(several, RequestPixels) and isinstance(one, RequestPixels)
    expected = served(gpu, *uploads)
    pixels = np.asarray(several.outputs[gpu.outputs.pixels])
    assert pixels.shape == expected[gpu.outputs.pixels].shape and pixels.dtype == expected[gpu.outputs.pixels].dtype
    assert np.abs(pixels.astype(np.int16) - expected[gpu.outputs.pixels]).mean() < 2.0  # grey levels
    for name, value in expected.items():
        if name != gpu.outputs.pixels:
            np.testing.assert_allclose(several.outputs[name], value, rtol=1e-6)
    assert [image.shape for image in several.images] == [(64, 64, 3)] * 2  # the drift thumbnails
    np.testing.assert_array_equal(several.sizes, [[240, 320], [300, 200]])


@pytest.mark.parametrize("mode", ["yolo_letterbox", "yolo_stretch"])
def test_the_ultralytics_letterbox_is_the_served_one(mode):
    """A YOLO pipeline's resize (``yolo_letterbox``, full decode, as ``new-pipeline --from yolo`` writes it; and
    ``yolo_stretch``, RT-DETR's): the fitted resize and the padded slice give the served float tensor, to the float
    rounding on web photos that need no resize."""
    from benchmarks import images
    from vision_serving.gpu_pixels import dali_pipeline, plan, settings

    spec = preprocessing.PreprocessSpec(640, 640, 640, "bilinear", (0.0,) * 3, (255.0,) * 3, resize=mode, decode_oversampling=0)
    chosen = plan.pipeline_settings(spec, settings.GpuSettings(1, 1.0), 4, "cpu", None)
    pipeline = dali_pipeline.build(chosen)
    limits = image_codec.ImageLimits(max_bytes=1 << 26, max_pixels=1 << 28)
    for payload in [*images.upload_mix("web")[:3], *images.phone_payloads(names=("coffee",))]:
        sample = plan.sample_plan(payload.data, image_codec.check(payload.data, limits), spec, preprocessing.decode_minimum(spec))
        got = np.asarray(dali_pipeline.run(pipeline, plan.feeds([sample], chosen.inputs)).sample(0))
        expected = preprocessing.preprocess_batch([image_codec.decode(payload.data, limits).image], spec)
        assert got.shape == expected.shape == (1, 3, 640, 640) and got.dtype == expected.dtype
        unresized = "@640" in payload.name and mode == "yolo_letterbox"
        assert np.abs(got - expected).mean() < (1e-6 if unresized else 0.5 / 255), payload.name
