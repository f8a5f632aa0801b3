"""HEIC and AVIF uploads through every pipeline of the shared server, over gRPC and HTTP.

Each answer is compared with the answer for a lossless PNG of the pixels the served decoder gives for that file
(decoded here by vision_serving.image_codec, the preprocess models' own decoder): classifier top-1, face count and
box IoU >= 0.98, mask IoU >= 0.99, the text reader's lines. The files are made by real encoders in the
``heif-encode`` environment (devtools/heif_encode.py): 8- and 10-bit, alpha, rotated (irot, the Exif kept), a
grid, several images. A malformed file is INVALID_ARGUMENT while the requests batched with it are answered.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cv2
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from builders import photos
from tests.support import faces
from tests.support import heif_files as heif_support
from vision_serving import image_codec, layout
from vision_serving.tasks import detection_matching, segmentation

pytestmark = pytest.mark.integration

CLIENTS = {"grpc": grpcclient, "http": httpclient}
LIMITS = image_codec.ImageLimits(max_bytes=1 << 26, max_pixels=1 << 28, accepted_formats=image_codec.FORMATS)
MIN_BOX_IOU = 0.98
MIN_MASK_IOU = 0.99
# What each pipeline is asked about: a face and a person, several faces, an espresso, a page of text.
SOURCES = ("astronaut", "faces_2x2", "coffee", "page")
VARIANTS: dict[str, dict[str, Any]] = {
    "heic": {"format": "heic"},
    "heic_10bit": {"format": "heic", "bits": 10},
    "heic_alpha": {"format": "heic", "alpha": True},
    # Stored sideways and turned upright by irot, as a phone stores a portrait; Apple's grid layout on a small photo.
    "heic_grid_irot": {"format": "heic", "tile_size": 256, "orientation": 6},
    "heic_multi": {"format": "heic", "multi": True},
    "avif": {"format": "avif"},
    "avif_10bit": {"format": "avif", "bits": 10},
    "avif_alpha": {"format": "avif", "alpha": True},
    "avif_irot": {"format": "avif", "orientation": 8},
}
# Exif orientation -> np.rot90 turns (anticlockwise) of the upright photo that give the stored pixels.
SIDEWAYS = {6: 1, 8: -1}
OUTPUTS = {
    "image_classifier": ("LABELS",),
    "face_detector": ("BOXES", "COUNT"),
    "person_segmenter": ("MASK", "COVERAGE"),
    "text_reader": ("TEXTS", "COUNT"),
}


@pytest.fixture(scope="module")
def heif_files() -> dict[str, bytes]:
    """``<source>/<variant>`` -> the encoded file."""
    composites = faces.photo_set()
    images: dict[str, np.ndarray] = {}
    for source in SOURCES:
        data = composites[source] if source in composites else photos.photo_bytes(source)
        rgb = image_codec.decode_rgb(data, LIMITS)
        images[source] = rgb
        images[f"{source}_rgba"] = np.dstack([rgb, np.full(rgb.shape[:2], 160, np.uint8)])
        for orientation, turns in SIDEWAYS.items():  # what a camera stores for an upright photo with this orientation
            stored = np.ascontiguousarray(np.rot90(rgb, turns))
            assert np.array_equal(image_codec.apply_orientation(stored, orientation), rgb)
            images[f"{source}_{orientation}"] = stored
    images["other"] = cv2.resize(images["coffee"], (96, 64))
    specs = []
    for source in SOURCES:
        for variant, options in VARIANTS.items():
            spec: dict[str, Any] = {"name": f"{source}/{variant}".replace("/", "__"), "format": options["format"], "image": source}
            if options.get("alpha"):
                spec["image"] = f"{source}_rgba"
            if "orientation" in options:
                spec["image"] = f"{source}_{options['orientation']}"
            if options.get("multi"):
                spec |= {"image": "other", "images": [source, "other"], "primary": 1}
            spec |= {key: options[key] for key in ("bits", "tile_size", "orientation") if key in options}
            specs.append(spec)
    encoded = heif_support.encode(specs, images)
    return {name.replace("__", "/"): data for name, data in encoded.items()}


def lossless_png(data: bytes) -> bytes:
    """The pixels the served decoder gives for ``data``, as a PNG."""
    rgb = image_codec.decode_rgb(data, LIMITS)
    ok, encoded = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    return encoded.tobytes()


def infer(server, pipeline: str, payloads: list[bytes], protocol: str) -> dict[str, np.ndarray]:
    module = CLIENTS[protocol]
    if protocol == "grpc":
        client, timeout = grpcclient.InferenceServerClient(server.grpc_url), {"client_timeout": 300}
    else:
        client, timeout = httpclient.InferenceServerClient(server.http_url, network_timeout=300.0), {}
    image = module.InferInput("IMAGE", [len(payloads), 1], "BYTES")
    image.set_data_from_numpy(np.array(payloads, dtype=np.object_).reshape(-1, 1))
    outputs = [module.InferRequestedOutput(name) for name in OUTPUTS[pipeline]]
    result = client.infer(pipeline, [image], outputs=outputs, **timeout)
    return {name: result.as_numpy(name) for name in OUTPUTS[pipeline]}


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    return float(detection_matching.box_iou(a, b)[0, 0])


def assert_same_answers(pipeline: str, got: dict[str, np.ndarray], reference: dict[str, np.ndarray], names: list[str]) -> None:
    for row, name in enumerate(names):
        if pipeline == "image_classifier":
            assert got["LABELS"][row, 0] == reference["LABELS"][row, 0], name
        elif pipeline == "face_detector":
            count = int(reference["COUNT"][row, 0])
            assert int(got["COUNT"][row, 0]) == count, name
            for k in range(count):
                assert box_iou(got["BOXES"][row, k], reference["BOXES"][row, k]) >= MIN_BOX_IOU, (name, k)
        elif pipeline == "person_segmenter":
            mask, expected = (segmentation.decode_png(outputs["MASK"][row, 0]) > 127 for outputs in (got, reference))
            union = np.logical_or(mask, expected).sum()
            assert mask.shape == expected.shape and (union == 0 or np.logical_and(mask, expected).sum() / union >= MIN_MASK_IOU), name
        else:
            count = int(reference["COUNT"][row, 0])
            assert int(got["COUNT"][row, 0]) == count, name
            assert got["TEXTS"][row, :count].tolist() == reference["TEXTS"][row, :count].tolist(), name


def test_every_pipeline_accepts_heic_and_avif():
    assert {p.name for p in layout.pipelines()} == set(OUTPUTS)


# Every pipeline over gRPC, and over HTTP all but the text reader: HTTP's BYTES framing of the same uploads is the
# preprocess's, shared by every pipeline, and the text reader's files, one request each, cost about 70 s per protocol.
CASES = [
    (pipeline, protocol) for pipeline in sorted(OUTPUTS) for protocol in ("grpc", "http") if (pipeline, protocol) != ("text_reader", "http")
]


@pytest.mark.parametrize(("pipeline", "protocol"), CASES)
def test_heic_and_avif_are_answered_as_a_lossless_png_of_their_pixels(triton_server, heif_files, pipeline, protocol):
    names = sorted(heif_files)
    # The text reader takes photos of one detector size per request (tests/integration/test_text_reader.py): one each.
    groups = [[name] for name in names] if pipeline == "text_reader" else [[n for n in names if n.startswith(f"{s}/")] for s in SOURCES]
    for group in groups:
        got = infer(triton_server, pipeline, [heif_files[name] for name in group], protocol)
        reference = infer(triton_server, pipeline, [lossless_png(heif_files[name]) for name in group], protocol)
        assert_same_answers(pipeline, got, reference, group)
    if pipeline == "image_classifier":  # and the answers are the photos' own, not only the same as the PNG's
        labels = infer(triton_server, pipeline, [heif_files[f"coffee/{variant}"] for variant in VARIANTS], protocol)["LABELS"]
        assert {label.decode() for label in labels[:, 0]} == {"espresso"}
    if pipeline == "face_detector":
        counts = infer(triton_server, pipeline, [heif_files[f"faces_2x2/{variant}"] for variant in VARIANTS], protocol)["COUNT"]
        assert counts[:, 0].tolist() == [4] * len(VARIANTS)


@pytest.mark.parametrize("pipeline", sorted(OUTPUTS))
def test_a_malformed_heic_is_invalid_argument_and_its_batch_neighbours_are_answered(triton_server, heif_files, pipeline):
    good = [heif_files[f"coffee/{variant}"] for variant in ("heic", "avif", "heic_grid_irot", "avif_10bit", "heic_alpha")]
    cut = heif_files["coffee/heic"][: len(heif_files["coffee/heic"]) // 2]
    lying = heif_support.with_ispe(heif_files["coffee/avif"], 64, 64)
    payloads = [*good[:2], cut, *good[2:4], lying, good[4]]
    refused = {2: "truncated HEIC", 5: "its AV1 stream codes"}
    expected = {
        index: infer(triton_server, pipeline, [lossless_png(data)], "grpc") for index, data in enumerate(payloads) if index not in refused
    }

    def send(data: bytes) -> dict[str, np.ndarray] | InferenceServerException:
        try:
            return infer(triton_server, pipeline, [data], "grpc")
        except InferenceServerException as error:
            return error

    with ThreadPoolExecutor(len(payloads)) as pool:  # concurrent: the preprocess batches them together
        answers = list(pool.map(send, payloads))
    for index, answer in enumerate(answers):
        if index in refused:
            assert isinstance(answer, InferenceServerException), index
            assert str(answer.status()) == "StatusCode.INVALID_ARGUMENT" and refused[index] in answer.message(), answer.message()
        else:
            assert not isinstance(answer, InferenceServerException), answer
            assert_same_answers(pipeline, answer, expected[index], [f"payload {index}"])
    # In one request, the whole request is refused, naming the bad image; the next request is answered.
    with pytest.raises(InferenceServerException, match="image 1 of 3: truncated HEIC") as error:
        infer(triton_server, pipeline, [good[0], cut, good[1]], "grpc")
    assert str(error.value.status()) == "StatusCode.INVALID_ARGUMENT"
    assert_same_answers(pipeline, infer(triton_server, pipeline, [good[0]], "grpc"), expected[0], ["after the refusal"])
