"""The person_segmenter ensemble on a real tritonserver, against MediaPipe's own runtime."""

from __future__ import annotations

import subprocess

import cv2
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import references
from vision_serving import image_codec, layout
from vision_serving.tasks import segmentation

pytestmark = pytest.mark.integration

MODEL = "person_segmenter"
PERSON_PHOTOS = ("astronaut", "grace_hopper", "camera")
OTHER_PHOTOS = ("coffee", "rocket", "motorcycle_left")
LIMITS = image_codec.ImageLimits(max_bytes=1 << 26, max_pixels=1 << 28)
CLIENTS = {"grpc": grpcclient, "http": httpclient}


def segment(server, images: list[bytes], protocol: str = "grpc") -> tuple[list[np.ndarray], np.ndarray]:
    module = CLIENTS[protocol]
    client = module.InferenceServerClient(server.grpc_url if protocol == "grpc" else server.http_url)
    image_input = module.InferInput("IMAGE", [len(images), 1], "BYTES")
    image_input.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(-1, 1))
    result = client.infer(MODEL, [image_input])
    pngs, coverage = result.as_numpy("MASK"), result.as_numpy("COVERAGE")
    assert pngs.shape == coverage.shape == (len(images), 1)
    return [segmentation.decode_png(png) for png in pngs[:, 0]], coverage[:, 0]


@pytest.fixture(scope="module")
def mediapipe_masks(photo_bytes) -> dict[str, np.ndarray]:
    return references.mediapipe_outputs("selfie_segmentation", {n: photo_bytes[n] for n in PERSON_PHOTOS + OTHER_PHOTOS})


@pytest.mark.parametrize("name", PERSON_PHOTOS + OTHER_PHOTOS)
def test_mask_matches_mediapipe(triton_server, photo_bytes, mediapipe_masks, name):
    """A PNG at the photo's own size, equal to MediaPipe's own mask (IoU >= 0.95), and its coverage."""
    (mask,), (coverage,) = segment(triton_server, [photo_bytes[name]])
    height, width = image_codec.decode_rgb(photo_bytes[name], LIMITS).shape[:2]
    assert mask.shape == (height, width) and mask.dtype == np.uint8
    assert set(np.unique(mask)) <= {0, 255}
    assert coverage == pytest.approx(float((mask == 255).mean()), abs=1e-6)
    reference = mediapipe_masks[name] >= 0.5
    assert reference.shape == mask.shape
    assert coverage == pytest.approx(float(reference.mean()), abs=0.01)
    if name in PERSON_PHOTOS:
        assert reference.mean() > 0.2  # the photo really shows a person
        assert segmentation.iou(mask, reference) >= 0.95


def test_a_one_pixel_photo_gets_a_one_pixel_mask(triton_server):
    """The smallest photo the docs accept: a 1x1 PNG and a 1x1 JPEG are answered, not an INTERNAL error."""
    pixel = np.full((1, 1, 3), 200, np.uint8)
    photos = [cv2.imencode(suffix, pixel)[1].tobytes() for suffix in (".png", ".jpg")]
    masks, coverage = segment(triton_server, photos)
    assert [mask.shape for mask in masks] == [(1, 1), (1, 1)] and set(coverage.tolist()) <= {0.0, 1.0}


def test_several_images_in_one_request_match_one_by_one(triton_server, photo_bytes):
    names = ["astronaut", "coffee", "grace_hopper"]
    together, coverage = segment(triton_server, [photo_bytes[n] for n in names])
    for index, name in enumerate(names):
        (alone,), (alone_coverage,) = segment(triton_server, [photo_bytes[name]])
        assert np.array_equal(together[index], alone)
        assert coverage[index] == pytest.approx(alone_coverage, abs=1e-6)


def test_http_and_grpc_agree(triton_server, photo_bytes):
    grpc_masks, grpc_coverage = segment(triton_server, [photo_bytes["astronaut"]], "grpc")
    http_masks, http_coverage = segment(triton_server, [photo_bytes["astronaut"]], "http")
    assert np.array_equal(grpc_masks[0], http_masks[0]) and grpc_coverage == pytest.approx(http_coverage)


@pytest.mark.parametrize(
    ("payload", "message"),
    [(b"", "empty image payload"), (b"GIF89a not really", "unrecognized image format"), (None, "truncated")],
    ids=["empty", "gif", "truncated"],
)
def test_bad_upload_is_invalid_argument_and_the_server_keeps_serving(triton_server, photo_bytes, payload, message):
    payload = photo_bytes["astronaut"][:30000] if payload is None else payload
    with pytest.raises(InferenceServerException, match=message) as error:
        segment(triton_server, [payload])
    assert str(error.value.status()) == "StatusCode.INVALID_ARGUMENT"
    (mask,), _ = segment(triton_server, [photo_bytes["camera"]])
    assert mask.shape == (512, 512)


def test_the_same_photos_through_every_pipeline(triton_server, photo_bytes):
    """One server, every pipeline, the same uploads."""
    names = ["astronaut", "chelsea", "coffee"]
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    image_input = grpcclient.InferInput("IMAGE", [len(names), 1], "BYTES")
    image_input.set_data_from_numpy(np.array([[photo_bytes[n]] for n in names], dtype=np.object_))
    labels = client.infer("image_classifier", [image_input]).as_numpy("LABELS")
    assert labels.shape == (3, 5) and labels[2, 0] == b"espresso"
    masks, coverage = segment(triton_server, [photo_bytes[n] for n in names])
    assert [m.shape for m in masks] == [image_codec.decode_rgb(photo_bytes[n], LIMITS).shape[:2] for n in names]
    assert coverage[0] > 0.3


def test_segment_client_saves_masks_and_overlays(triton_server, photo_bytes, tmp_path):
    """./scripts/segment: a mask PNG (and overlay) per image, one error line for a bad file, exit 1."""
    photos_dir = tmp_path / "photos"
    photos_dir.mkdir()
    (photos_dir / "astronaut.png").write_bytes(photo_bytes["astronaut"])
    (photos_dir / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    out = tmp_path / "masks"
    completed = subprocess.run(
        [
            str(layout.REPOSITORY_ROOT / "scripts" / "segment"),
            "--url",
            triton_server.grpc_url,
            "--overlay",
            "--out-dir",
            str(out),
            str(photos_dir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 1, completed.stderr
    assert f"segment: error: {photos_dir / 'broken.jpg'}:" in completed.stderr
    (line,) = completed.stdout.splitlines()
    assert line.startswith(f"{photos_dir / 'astronaut.png'}  coverage ") and "astronaut.mask.png" in line
    mask = segmentation.decode_png((out / "astronaut.mask.png").read_bytes())
    assert mask.shape == (512, 512) and 0.5 < (mask == 255).mean() < 0.6
    assert (out / "astronaut.overlay.jpg").stat().st_size > 1000
