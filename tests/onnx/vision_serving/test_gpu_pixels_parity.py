"""The GPU pixel path's DALI pipeline, run here on DALI's CPU operators (``device_id=None``: the same graph the GPU runs,
with ``decoders.image`` on ``cpu`` instead of ``mixed``), against the served CPU preprocess: the shipped image-to-tensor
pipelines on the benchmarks' web and 12 MP phone JPEGs and encoder flavours (progressive, grey, 4:4:4, EXIF-rotated),
through the served core and postprocess. The bounds are the served reduced decoding's against the full decode
(:data:`MIN_BOX_IOU`): top-1 unchanged, the same face count and boxes IoU >= 0.98, masks IoU >= 0.99 on web photos.
A GPU decodes with nvJPEG instead (tests/gpu/test_gpu_pixels.py).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import pytest
from PIL import Image

from benchmarks import images, inprocess
from vision_serving import drift, image_codec, layout, model_config
from vision_serving.gpu_pixels import plan
from vision_serving.gpu_pixels.step import GpuPreprocess, RequestPixels
from vision_serving.tasks import detection_matching, segmentation

pytestmark = pytest.mark.onnx

# The bounds the served reduced decode is held to against the full decode (docs/design.md, "Reduced decoding";
# python -m benchmarks.whatif --decode-bounds), on the same uploads: web JPEGs, every bound; 12 MP phone JPEGs, the
# same top-1, boxes IoU >= 0.916 (the full decode moves as much with another draw of the sensor noise), masks IoU
# >= 0.99 on the photos with a person. A photo without one has a low-confidence mask that moves with any change (the
# reduced decode moves a phone photo's to 0.837); the GPU path's warp (DALI's warp_affine for OpenCV's warpAffine,
# the same decode) moves those to 0.981 on the web photos and 0.951 on the 12 MP coffee photo: held to 0.95.
MIN_BOX_IOU = {"web": 0.98, "phone": 0.916}
MIN_MASK_IOU = 0.99
MIN_MASK_IOU_NO_PERSON = 0.95
PERSON_PHOTOS = ("astronaut", "camera")
PIPELINES = ("image_classifier", "face_detector", "person_segmenter")
LIMITS = image_codec.ImageLimits(max_bytes=1 << 26, max_pixels=1 << 28, accepted_formats=image_codec.FORMATS)


def _jpeg(rgb: np.ndarray, **options) -> bytes:
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, "JPEG", quality=90, **options)
    return out.getvalue()


def _rotated(rgb: np.ndarray) -> bytes:
    """Stored sideways with EXIF orientation 6 (displayed upright), as a phone stores a portrait."""
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(np.rot90(rgb, 1))).save(out, "JPEG", quality=90, exif=exif.tobytes())
    return out.getvalue()


@pytest.fixture(scope="module")
def uploads(built_repository) -> dict[str, tuple[bytes, str]]:
    """JPEGs the GPU decoder takes, by name -> (bytes, web or phone): the benchmarks' web mix (the 8 photos at 640,
    1024 and 1280 px), encoder flavours of one photo (progressive, grey, 4:4:4, EXIF-rotated) and 12 MP phone photos."""
    chosen = {payload.name: (payload.data, "web") for payload in images.upload_mix("web")}
    photo = image_codec.decode_rgb(chosen["astronaut@640"][0], LIMITS)
    flavours = {
        "progressive": _jpeg(photo, progressive=True),
        "grey": _jpeg(np.ascontiguousarray(photo.mean(axis=2).astype(np.uint8))),
        "subsampling_444": _jpeg(photo, subsampling=0),
        "exif_6": _rotated(photo),
    }
    chosen |= {f"astronaut/{name}": (data, "web") for name, data in flavours.items()}
    chosen |= {payload.name: (payload.data, "phone") for payload in images.phone_payloads(names=("coffee", "astronaut"))}
    for name, (data, _) in chosen.items():
        assert plan.cpu_reason(data, image_codec.check(data, LIMITS)) is None, name  # every one takes the GPU path
    return chosen


def _gpu_tensors(gpu: GpuPreprocess, served: inprocess.BenchedPipeline, payloads: Sequence[bytes]) -> dict[str, np.ndarray]:
    """One DALI run of one-upload requests (as a batch of the GPU preprocess), as the served ensemble tensors."""
    outcomes = gpu.compute([gpu.parse(np.array([data], dtype=np.object_)) for data in payloads])
    assert all(isinstance(outcome, RequestPixels) and not outcome.on_gpu for outcome in outcomes)
    assert gpu.rebuilds == 0  # DALI took every upload
    step = served.steps["preprocess"]
    names = outcomes[0].outputs  # type: ignore[union-attr]
    return {step.outputs[name]: np.concatenate([np.asarray(o.outputs[name]) for o in outcomes]) for name in names}  # type: ignore[union-attr]


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    return float(detection_matching.box_iou(a, b)[0, 0])


def agreement(pipeline: str, got: dict[str, np.ndarray], reference: dict[str, np.ndarray], names: list[str]) -> dict[str, float]:
    """Per upload: 1.0 for the same top-1 (else 0.0), the smallest face box IoU (0.0 for another count), the mask IoU."""
    scores = {}
    for row, name in enumerate(names):
        if pipeline == "image_classifier":
            scores[name] = float(got["LABELS"][row, 0] == reference["LABELS"][row, 0])
        elif pipeline == "face_detector":
            count = int(reference["COUNT"][row, 0])
            ious = [box_iou(got["BOXES"][row, k], reference["BOXES"][row, k]) for k in range(count)]
            scores[name] = min(ious, default=1.0) if int(got["COUNT"][row, 0]) == count else 0.0
        else:
            mask, expected = (segmentation.decode_png(outputs["MASK"][row, 0]) > 127 for outputs in (got, reference))
            union = np.logical_or(mask, expected).sum()
            scores[name] = 1.0 if union == 0 else float(np.logical_and(mask, expected).sum() / union)
    return scores


def bound(pipeline: str, name: str, kind: str) -> float:
    """The smallest agreement an upload is held to."""
    if pipeline == "image_classifier":
        return 1.0
    if pipeline == "face_detector":
        return MIN_BOX_IOU[kind]
    return MIN_MASK_IOU if name.split("@")[0].split("/")[0] in PERSON_PHOTOS else MIN_MASK_IOU_NO_PERSON


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_dali_s_cpu_operators_answer_as_the_served_cpu_preprocess(uploads, pipeline):
    served = inprocess.load(layout.pipeline(pipeline))
    config = model_config.load_config(layout.pipeline(pipeline).model_dir("preprocess"))
    gpu = GpuPreprocess(config, device="cpu", device_id=None)
    names = sorted(uploads)
    payloads = [uploads[name][0] for name in names]
    cpu_tensors = served.preprocessed([served.decode(data) for data in payloads])
    gpu_tensors = _gpu_tensors(gpu, served, payloads)
    assert set(gpu_tensors) == set(cpu_tensors)
    for name, value in cpu_tensors.items():
        assert gpu_tensors[name].shape == value.shape and gpu_tensors[name].dtype == value.dtype, name
        if value.dtype != np.uint8 and name != served.steps["preprocess"].outputs[gpu.outputs.pixels]:
            np.testing.assert_allclose(gpu_tensors[name], value, rtol=1e-6, err_msg=name)  # sizes and transforms: the plan's
    reference = served.postprocess(served.with_core(cpu_tensors)).outputs()
    got = served.postprocess(served.with_core(gpu_tensors)).outputs()
    scores = agreement(pipeline, got, reference, names)
    print(f"{pipeline}: {len(names)} JPEGs, " + ", ".join(f"{name} {score:.4f}" for name, score in scores.items()))
    assert (
        len(scores) == len(names)
        and {name: score for name, score in scores.items() if score < bound(pipeline, name, uploads[name][1])} == {}
    )


@pytest.mark.parametrize("pipeline", ["image_classifier", "face_detector"])
def test_the_drift_features_of_dali_s_thumbnails_are_the_served_ones(uploads, pipeline):
    """The preprocess's drift statistics from the 64 x 64 thumbnails the pipeline hands back (sampled from the emulated
    reduced decode) against the served ones (from the served decode): the pixel statistics within 0.01 (of 0..1), the
    sharpness within 10 %, the sizes, bytes and formats the same."""
    config = model_config.load_config(layout.pipeline(pipeline).model_dir("preprocess"))
    gpu = GpuPreprocess(config, device="cpu", device_id=None)
    payloads = [data for data, _ in uploads.values()]
    outcomes = gpu.compute([gpu.parse(np.array([data], dtype=np.object_)) for data in payloads])
    assert all(isinstance(outcome, RequestPixels) for outcome in outcomes)
    answered = [outcome for outcome in outcomes if isinstance(outcome, RequestPixels)]
    facts = drift.payload_facts(payloads)
    got = drift.image_features([image for o in answered for image in o.images], np.concatenate([o.sizes for o in answered]), *facts)
    decoded = [image_codec.decode(data, gpu.limits, gpu.minimum) for data in payloads]
    sizes = np.array([[item.height, item.width] for item in decoded])
    expected = drift.image_features([item.image for item in decoded], sizes, *facts)
    for name, values in expected.numeric.items():
        if name == "sharpness":
            assert np.abs(got.numeric[name] / values - 1).max() <= 0.10, name
        else:
            np.testing.assert_allclose(got.numeric[name], values, atol=0.01, err_msg=name)
    assert got.categorical == expected.categorical
