"""vision_serving.gpu_pixels.plan and .settings, plain Python (no DALI): which checked uploads the GPU decoder takes,
the reduced decode's n/8 (the served decoder's own sizes), the warp matrix's coordinates, the kinds and settings."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image

from vision_serving import image_codec, image_structure, layout, model_config, preprocessing
from vision_serving.gpu_pixels import plan, settings
from vision_serving.image_codec import ImageLimits, MinimumSize

LIMITS = ImageLimits(max_bytes=1 << 26, max_pixels=1 << 26, accepted_formats=image_codec.FORMATS)


def smooth(width: int, height: int) -> np.ndarray:
    x, y = np.meshgrid(np.linspace(0, 1, width), np.linspace(0, 1, height))
    return (np.dstack([x, y, (x + y) / 2]) * 255).astype(np.uint8)


def jpeg(image: np.ndarray, mode: str = "RGB", **options) -> bytes:
    out = io.BytesIO()
    Image.fromarray(image).convert(mode).save(out, "JPEG", quality=90, **options)
    return out.getvalue()


def reason(data: bytes) -> str | None:
    return plan.cpu_reason(data, image_codec.check(data, LIMITS))


def test_baseline_progressive_and_grey_jpegs_go_to_the_gpu():
    image = smooth(96, 64)
    for data in (jpeg(image), jpeg(image, progressive=True), jpeg(image, "L")):
        assert reason(data) is None
        frame = image_structure.jpeg_frame_header(data)
        assert (frame.width, frame.height, frame.precision) == (96, 64, 8)


def test_other_formats_and_jpegs_nvjpeg_does_not_decode_take_the_cpu():
    image = smooth(96, 64)
    png = cv2.imencode(".png", image)[1].tobytes()
    assert reason(png) == "PNG is decoded on the CPU"
    cmyk = jpeg(image, "CMYK")
    assert reason(cmyk) == "a JPEG of 4 components (CMYK or YCCK) is decoded on the CPU"
    data = bytearray(jpeg(image))
    sof = data.index(b"\xff\xc0")
    data[sof + 1] = 0xC9  # the same frame header, arithmetic coding
    checked = image_codec.check(bytes(data), LIMITS)
    assert "coding is decoded on the CPU" in (plan.cpu_reason(bytes(data), checked) or "")
    data[sof + 1] = 0xC1
    data[sof + 4] = 12  # 12-bit samples
    assert plan.cpu_reason(bytes(data), checked) == "a JPEG of 12-bit samples is decoded on the CPU"


@pytest.mark.parametrize(
    "minimum", [MinimumSize(shorter_side=256), MinimumSize(shorter_side=400), MinimumSize(width=600, height=256), None]
)
@pytest.mark.parametrize("orientation", [1, 6])
def test_the_reduced_size_is_the_served_decoder_s(minimum, orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = jpeg(smooth(2000, 1500), exif=exif.tobytes())
    checked = image_codec.check(data, LIMITS)
    served = image_codec.decode(data, LIMITS, minimum).image.shape[:2]
    transposed = orientation in plan.TRANSPOSING_ORIENTATIONS
    eighths = plan.reduced_eighths(checked, minimum, transposed)
    stored = (-(-1500 * eighths // 8), -(-2000 * eighths // 8))
    assert (stored[::-1] if transposed else stored) == served


def test_the_warp_matrix_maps_pixel_centres_in_dali_s_corner_coordinates():
    # OpenCV's centres: tensor pixel i -> source 2i + 0.5 (a 2x downscale). DALI's corners: pixel i's centre is i + 0.5,
    # so the matrix maps i + 0.5 to (2i + 0.5) + 0.5.
    to_source = np.array([[2.0, 0.0, 0.5], [0.0, 2.0, 0.5], [0.0, 0.0, 1.0]])
    matrix = plan.dali_matrix(to_source)
    assert matrix.shape == (2, 3) and matrix.dtype == np.float32
    for i in (0, 3):
        np.testing.assert_allclose(matrix @ np.array([i + 0.5, i + 0.5, 1.0]), [2 * i + 1.0] * 2)


@pytest.mark.parametrize(("pipeline", "kind"), [("image_classifier", "region"), ("face_detector", "warp"), ("person_segmenter", "warp")])
def test_each_shipped_resize_has_a_kind_and_its_inputs(pipeline, kind):
    config = model_config.load_config(layout.pipeline(pipeline).model_dir("preprocess"))
    spec = preprocessing.PreprocessSpec.from_config(config)
    assert plan.kind(spec) == kind
    gpu = settings.GpuSettings.from_config(config)
    assert (gpu.threads, gpu.hw_decoder_load) == (2, 1.0)  # the defaults: not in a CPU config
    pipe = plan.pipeline_settings(spec, gpu, config.max_batch_size, "cpu", None)
    data = jpeg(smooth(1280, 853))
    sample = plan.sample_plan(data, image_codec.check(data, LIMITS), spec, preprocessing.decode_minimum(spec))
    assert set(sample.feeds) | {settings.ENCODED} == set(pipe.inputs) and sample.decoded == (853, 1280)
    fed = plan.feeds([sample, sample], pipe.inputs)
    assert set(fed) == set(pipe.inputs) and all(len(values) == 2 for values in fed.values())


def test_a_yolo_letterbox_is_a_fitted_resize_and_a_padded_slice():
    spec = preprocessing.PreprocessSpec(640, 640, 640, "bilinear", (0.0,) * 3, (1.0,) * 3, resize="yolo_letterbox", pad_value=114)
    data = jpeg(smooth(1280, 720))
    sample = plan.sample_plan(data, image_codec.check(data, LIMITS), spec, preprocessing.decode_minimum(spec))
    assert plan.kind(spec) == "fit_pad"
    np.testing.assert_array_equal(sample.feeds[settings.FIT_SIZE], [360, 640])
    np.testing.assert_array_equal(sample.feeds[settings.ANCHOR], [-140, 0])


def test_a_yolo_stretch_is_a_resize_to_the_tensor_and_nothing_padded():
    spec = preprocessing.PreprocessSpec(640, 640, 640, "bilinear", (0.0,) * 3, (1.0,) * 3, resize="yolo_stretch")
    data = jpeg(smooth(1280, 720))
    sample = plan.sample_plan(data, image_codec.check(data, LIMITS), spec, preprocessing.decode_minimum(spec))
    assert plan.kind(spec) == "fit_pad"
    np.testing.assert_array_equal(sample.feeds[settings.FIT_SIZE], [640, 640])
    np.testing.assert_array_equal(sample.feeds[settings.ANCHOR], [0, 0])


def test_the_settings_refuse_what_the_graph_cannot_build():
    with pytest.raises(ValueError, match="no resize kind"):
        settings.PixelPipelineSettings(kind="crop", height=1, width=1)
    with pytest.raises(ValueError, match="mean and std"):
        settings.PixelPipelineSettings(kind="warp", height=1, width=1, mean=(0.0, 0.0, 0.0))
    config = model_config.ModelConfig(name="p")
    config.parameters[settings.DEVICE_PARAMETER].string_value = "tpu"
    with pytest.raises(model_config.ConfigError, match="'tpu' is not one of cpu, gpu"):
        settings.device(config)
    config.parameters[settings.DEVICE_PARAMETER].string_value = "gpu"
    config.parameters["hw_decoder_load"].string_value = "2"
    assert settings.device(config) == "gpu"
    with pytest.raises(model_config.ConfigError, match="hw_decoder_load in"):
        settings.GpuSettings.from_config(config)
