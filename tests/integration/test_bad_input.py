"""Bad input against the real server: every malformed request gets a clear error, nothing else breaks.

Limits (bytes, pixels, batch) are read from the model configs, never repeated
here. Covers: malformed and hostile payloads, images we accept on purpose
(16-bit, CMYK, 1x1, elongated, ...), malformed requests (dtype, shape, names,
versions, TOP_K), all of them mixed with good requests in shared dynamic
batches, and the admin surface (model control, shared memory registration,
restricted APIs).
"""

from __future__ import annotations

import io
import json
import math
import struct
import urllib.error
import urllib.request
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import cv2
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from PIL import Image
from tritonclient.utils import InferenceServerException

from devtools.loadgen import GOLDEN_LABELS, stub_processes
from tests.support.deployment import ADMIN_HEADER, ADMIN_KEY, admin_grpc_headers, admin_http_headers
from vision_serving import layout, model_config, preprocessing
from vision_serving.image_codec import decode_rgb

pytestmark = pytest.mark.integration

MODEL = "image_classifier"
CLIENTS = {"grpc": grpcclient, "http": httpclient}
STATUS = {  # gRPC status -> HTTP status, as Triton maps them
    "INVALID_ARGUMENT": "400",
    "NOT_FOUND": "404",
}


# --------------------------------------------------------------------------- limits from the configs


@pytest.fixture(scope="module")
def limits(built_repository):
    return preprocessing.limits_from_config(model_config.load_config(built_repository / "image_classifier" / "image_classifier_preprocess"))


@pytest.fixture(scope="module")
def max_batch(built_repository) -> int:
    return int(model_config.load_config(built_repository / "image_classifier" / MODEL).max_batch_size)


# --------------------------------------------------------------------------- payload builders


def encode(rgb: np.ndarray, fmt: str, mode: str | None = None, **options) -> bytes:
    image = Image.fromarray(rgb)
    if mode:
        image = image.convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_declaring(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + png_chunk(b"IEND", b"")


def jpeg_segments(data: bytes) -> list[tuple[int, int]]:
    """(offset, marker) of each header segment up to the first scan."""
    position, found = 2, []
    while position + 4 <= len(data):
        marker = data[position + 1]
        found.append((position, marker))
        if marker == 0xDA:
            break
        position += 2 + struct.unpack(">H", data[position + 2 : position + 4])[0]
    return found


def patch_jpeg(data: bytes, marker: int, offset_in_segment: int, value: bytes) -> bytes:
    position = next(offset for offset, found in jpeg_segments(data) if found == marker)
    patched = bytearray(data)
    patched[position + offset_in_segment : position + offset_in_segment + len(value)] = value
    return bytes(patched)


def jpeg_with_scans(rgb: np.ndarray, extra_scans: int) -> bytes:
    """A progressive JPEG whose last scan is repeated: libjpeg decodes each repeat (LJT-01-003)."""
    data = encode(rgb, "JPEG", progressive=True, quality=90)
    last_sos = data.rindex(b"\xff\xda")
    scan = data[last_sos:-2]
    return data[:-2] + scan * extra_scans + b"\xff\xd9"


@dataclass(frozen=True)
class Expect:
    status: str  # "OK", "INVALID_ARGUMENT", "NOT_FOUND"
    message: str = ""  # a fragment the error message must contain
    labels: frozenset[str] | None = None  # accepted top-1 labels, for "OK"


def payload_corpus(photo_bytes: dict[str, bytes], limits) -> dict[str, tuple[bytes, Expect]]:
    """Kind -> (IMAGE payload, what the server must answer)."""
    coffee = decode_rgb(photo_bytes["coffee"], limits)
    camera = decode_rgb(photo_bytes["camera"], limits)
    jpeg = encode(coffee, "JPEG", quality=90)
    png = photo_bytes["chelsea"]
    rng = np.random.default_rng(20240601)
    side_over = math.isqrt(limits.max_pixels) + 1
    bgr16 = cv2.cvtColor(coffee, cv2.COLOR_RGB2BGR).astype(np.uint16) * 257
    gray16 = encode((camera[..., 0].astype(np.uint16) * 257), "PNG")
    corrupt_idat = bytearray(png)
    idat = corrupt_idat.index(b"IDAT") + 8
    corrupt_idat[idat : idat + 256] = bytes(256)
    invalid = "INVALID_ARGUMENT"
    espresso = GOLDEN_LABELS["coffee"]
    return {
        # rejected before decoding
        "empty": (b"", Expect(invalid, "empty image payload")),
        "random_bytes": (rng.bytes(4096), Expect(invalid, "unrecognized image format")),
        "text": (b"this is not an image", Expect(invalid, "unrecognized image format")),
        "file_path": (b"/etc/passwd", Expect(invalid, "unrecognized image format")),
        "gif": (encode(coffee, "GIF"), Expect(invalid, "looks like GIF, which is not accepted")),
        "bmp": (encode(coffee, "BMP"), Expect(invalid, "looks like BMP, which is not accepted")),
        "tiff": (encode(coffee, "TIFF"), Expect(invalid, "looks like TIFF, which is not accepted")),
        "oversized": (
            jpeg + bytes(limits.max_bytes + 1 - len(jpeg)),
            Expect(invalid, f"over the limit of {limits.max_bytes} bytes"),
        ),
        "png_100000x100000": (png_declaring(100_000, 100_000), Expect(invalid, "declares 100000x100000")),
        "png_just_over_pixel_limit": (
            png_declaring(side_over, side_over),
            Expect(invalid, f"over the limit of {limits.max_pixels} pixels"),
        ),
        "jpeg_65000x65000": (
            patch_jpeg(jpeg, 0xC0, 5, struct.pack(">HH", 65000, 65000)),
            Expect(invalid, "declares 65000x65000"),
        ),
        "png_zero_width": (png_declaring(0, 10), Expect(invalid, "declared size 0x10")),
        "png_side_over_limit": (
            png_declaring(limits.max_side + 1, 2),
            Expect(invalid, f"a side over the limit of {limits.max_side} pixels"),
        ),
        "png_without_ihdr": (png.replace(b"IHDR", b"XXXX", 1), Expect(invalid, "missing IHDR")),
        "truncated_jpeg": (jpeg[: len(jpeg) // 2], Expect(invalid, "truncated JPEG")),
        "truncated_png": (png[: len(png) // 2], Expect(invalid, "truncated PNG")),
        "jpeg_header_only": (jpeg[:20], Expect(invalid, "truncated JPEG")),
        "jpeg_broken_marker": (patch_jpeg(jpeg, 0xDB, 0, b"\x00"), Expect(invalid, "expected a marker")),
        "jpeg_scan_before_frame": (
            jpeg[:2] + jpeg[jpeg.index(b"\xff\xda") :],
            Expect(invalid, "no frame header before image data"),
        ),
        "jpeg_scan_bomb": (jpeg_with_scans(camera, 80), Expect(invalid, "scans (the limit)")),
        # rejected by the decoder
        "jpeg_corrupt_huffman_table": (patch_jpeg(jpeg, 0xC4, 4, b"\x77"), Expect(invalid, "corrupt JPEG")),
        "jpeg_corrupt_quant_table": (patch_jpeg(jpeg, 0xDB, 4, b"\x0f"), Expect(invalid, "corrupt JPEG")),
        "jpeg_zero_components": (patch_jpeg(jpeg, 0xC0, 9, b"\x00"), Expect(invalid, "corrupt JPEG")),
        "png_corrupt_pixel_data": (bytes(corrupt_idat), Expect(invalid, "corrupt PNG")),
        # accepted on purpose: real images clients send
        "png_16bit_rgb": (cv2.imencode(".png", bgr16)[1].tobytes(), Expect("OK", labels=espresso)),
        "png_16bit_gray": (gray16, Expect("OK", labels=GOLDEN_LABELS["camera"])),
        "jpeg_cmyk": (encode(coffee, "JPEG", mode="CMYK", quality=95), Expect("OK", labels=espresso)),
        "jpeg_progressive": (encode(coffee, "JPEG", progressive=True, quality=90), Expect("OK", labels=espresso)),
        "jpeg_grayscale": (encode(camera[..., 0], "JPEG", quality=90), Expect("OK", labels=GOLDEN_LABELS["camera"])),
        "png_rgba": (encode(coffee, "PNG", mode="RGBA"), Expect("OK", labels=espresso)),
        "png_palette": (encode(coffee, "PNG", mode="P"), Expect("OK")),
        "png_1x1": (encode(coffee[:1, :1], "PNG"), Expect("OK")),
        "jpeg_1x1": (encode(coffee[:1, :1], "JPEG"), Expect("OK")),
        "png_4000x3": (encode(cv2.resize(coffee, (4000, 3)), "PNG"), Expect("OK")),
        "jpeg_3x4000": (encode(cv2.resize(coffee, (3, 4000)), "JPEG"), Expect("OK")),
        "webp": (encode(coffee, "WEBP", quality=90), Expect("OK", labels=espresso)),
        "jpeg_with_trailing_video": (jpeg + b"\x00\x00\x00\x18ftypmp42" + rng.bytes(20000), Expect("OK", labels=espresso)),
    }


@pytest.fixture(scope="module")
def corpus(photo_bytes, limits):
    return payload_corpus(photo_bytes, limits)


PAYLOAD_KINDS = [
    "empty", "random_bytes", "text", "file_path", "gif", "bmp", "tiff", "oversized",
    "png_100000x100000", "png_just_over_pixel_limit", "jpeg_65000x65000", "png_zero_width", "png_side_over_limit", "png_without_ihdr",
    "truncated_jpeg", "truncated_png", "jpeg_header_only", "jpeg_broken_marker", "jpeg_scan_before_frame",
    "jpeg_scan_bomb", "jpeg_corrupt_huffman_table", "jpeg_corrupt_quant_table", "jpeg_zero_components",
    "png_corrupt_pixel_data",
    "png_16bit_rgb", "png_16bit_gray", "jpeg_cmyk", "jpeg_progressive", "jpeg_grayscale", "png_rgba",
    "png_palette", "png_1x1", "jpeg_1x1", "png_4000x3", "jpeg_3x4000", "webp", "jpeg_with_trailing_video",
]  # fmt: skip


def client_for(server, protocol: str):
    module = CLIENTS[protocol]
    return module.InferenceServerClient(server.grpc_url if protocol == "grpc" else server.http_url)


def image_tensor(module, payloads: list[bytes], shape=None, dtype="BYTES", name="IMAGE"):
    array = np.array(payloads, dtype=np.object_).reshape(-1, 1)
    tensor = module.InferInput(name, list(shape or array.shape), dtype)
    tensor.set_data_from_numpy(array if shape is None else array.reshape(shape))
    return tensor


def int_tensor(module, name: str, values, dtype="INT32"):
    array = np.asarray(values, dtype=np.int32 if dtype == "INT32" else np.float32).reshape(-1, 1)
    tensor = module.InferInput(name, list(array.shape), dtype)
    tensor.set_data_from_numpy(array)
    return tensor


def outcome(call) -> tuple[str, str, object]:
    """("OK", "", labels) or (status, message, None); status in gRPC spelling."""
    try:
        result = call()
    except InferenceServerException as error:
        status = str(error.status()).removeprefix("StatusCode.")
        status = {v: k for k, v in STATUS.items()}.get(status, status)
        return status, error.message(), None
    return "OK", "", result.as_numpy("LABELS")


def check(expect: Expect, got: tuple[str, str, object], kind: str) -> None:
    status, message, labels = got
    assert status == expect.status, f"{kind}: expected {expect.status}, got {status}: {message}"
    if status == "OK":
        assert labels is not None and labels.shape[-1] == 5, kind
        if expect.labels is not None:
            assert labels[0, 0].decode() in expect.labels, f"{kind}: top-1 {labels[0, 0]!r}"
    else:
        assert expect.message in message, f"{kind}: {message!r} does not name the problem ({expect.message!r})"


# --------------------------------------------------------------------------- payloads


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("kind", PAYLOAD_KINDS)
def test_payload(triton_server, corpus, kind, protocol):
    payload, expect = corpus[kind]
    client, module = client_for(triton_server, protocol), CLIENTS[protocol]
    check(expect, outcome(lambda: client.infer(MODEL, [image_tensor(module, [payload])])), kind)


def test_corpus_is_broad(corpus):
    assert sorted(corpus) == sorted(PAYLOAD_KINDS)
    rejected = [kind for kind, (_, expect) in corpus.items() if expect.status != "OK"]
    assert len(rejected) >= 20 and len(corpus) - len(rejected) >= 8


# --------------------------------------------------------------------------- malformed requests


def request_cases(module, good: bytes, max_batch: int) -> dict[str, tuple[dict, Expect]]:
    """Kind -> (infer() keyword arguments, expectation)."""
    invalid = "INVALID_ARGUMENT"

    def one():
        return image_tensor(module, [good])

    return {
        "batch_over_max_batch_size": (
            {"inputs": [image_tensor(module, [good] * (max_batch + 1))]},
            Expect(invalid, f"batch-size must be <= {max_batch}"),
        ),
        "fp32_instead_of_bytes": (
            {"inputs": [int_tensor(module, "IMAGE", [0.0], dtype="FP32")]},
            Expect(invalid, "data-type is 'FP32', but model 'image_classifier' expects 'BYTES'"),
        ),
        "shape_1x2": ({"inputs": [image_tensor(module, [good, good], shape=[1, 2])]}, Expect(invalid, "unexpected shape")),
        "shape_1": ({"inputs": [image_tensor(module, [good], shape=[1])]}, Expect(invalid, "unexpected shape")),
        # Triton 2.51's ensemble does not check required inputs itself: the error is
        # INVALID_ARGUMENT but its message is the ensemble scheduler's generic one.
        "missing_image": ({"inputs": [int_tensor(module, "TOP_K", [3])]}, Expect(invalid, "at least one output is not set")),
        "unknown_input_name": (
            {"inputs": [one(), int_tensor(module, "MASK", [1])]},
            Expect(invalid, "unexpected inference input 'MASK'"),
        ),
        "unknown_version": ({"inputs": [one()], "model_version": "99"}, Expect("NOT_FOUND", "version 99 is not found")),
        "unknown_model": ({"inputs": [one()], "model_name": "resnet"}, Expect("NOT_FOUND", "'resnet' is not found")),
        "top_k_zero": ({"inputs": [one(), int_tensor(module, "TOP_K", [0])]}, Expect(invalid, "TOP_K must be between 1 and")),
        "top_k_negative": ({"inputs": [one(), int_tensor(module, "TOP_K", [-5])]}, Expect(invalid, "got -5")),
        "top_k_huge": ({"inputs": [one(), int_tensor(module, "TOP_K", [2**31 - 1])]}, Expect(invalid, f"got {2**31 - 1}")),
        "top_k_fp32": (
            {"inputs": [one(), int_tensor(module, "TOP_K", [3.0], dtype="FP32")]},
            Expect(invalid, "'TOP_K' data-type is 'FP32'"),
        ),
        "top_k_batch_mismatch": (
            {"inputs": [image_tensor(module, [good, good]), int_tensor(module, "TOP_K", [3])]},
            Expect(invalid, "batch size does not match"),
        ),
        "bad_image_inside_batch": (
            {"inputs": [image_tensor(module, [good, b"GIF89a....", good])]},
            Expect(invalid, "image 1 of 3: unrecognized image format"),
        ),
    }


REQUEST_KINDS = [
    "batch_over_max_batch_size", "fp32_instead_of_bytes", "shape_1x2", "shape_1", "missing_image",
    "unknown_input_name", "unknown_version", "unknown_model", "top_k_zero", "top_k_negative", "top_k_huge",
    "top_k_fp32", "top_k_batch_mismatch", "bad_image_inside_batch",
]  # fmt: skip


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("kind", REQUEST_KINDS)
def test_malformed_request(triton_server, photo_bytes, max_batch, kind, protocol):
    client, module = client_for(triton_server, protocol), CLIENTS[protocol]
    cases = request_cases(module, photo_bytes["coffee"], max_batch)
    assert sorted(cases) == sorted(REQUEST_KINDS)
    arguments, expect = cases[kind]
    arguments = {"model_name": MODEL, **arguments}
    check(expect, outcome(lambda: client.infer(**arguments)), kind)


# --------------------------------------------------------------------------- all at once


def test_bad_requests_share_batches_with_good_ones_and_break_nothing(triton_server, corpus, photo_bytes, max_batch):
    """Every bad payload and request, concurrently with good ones (so they share dynamic
    batches): each answered as expected, the stubs are the same processes, all ready."""
    stubs_before = stub_processes(triton_server.process.pid)
    assert len(stubs_before) >= 4
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    stats_before = client.get_inference_statistics("image_classifier_preprocess", as_json=True)["model_stats"][0]

    good = [(f"good_{name}", photo_bytes[name], Expect("OK", labels=labels)) for name, labels in GOLDEN_LABELS.items()]
    work = [(kind, payload, expect) for kind, (payload, expect) in corpus.items()] + good * 4
    requests = request_cases(grpcclient, photo_bytes["coffee"], max_batch)

    def run(item):
        kind, payload, expect = item
        local = grpcclient.InferenceServerClient(triton_server.grpc_url)
        if isinstance(payload, dict):
            arguments = {"model_name": MODEL, **payload}
            return kind, expect, outcome(lambda: local.infer(**arguments, client_timeout=120))
        return kind, expect, outcome(lambda: local.infer(MODEL, [image_tensor(grpcclient, [payload])], client_timeout=120))

    work += [(kind, arguments, expect) for kind, (arguments, expect) in requests.items()]
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(run, work * 2))
    for kind, expect, got in results:
        check(expect, got, kind)

    stats = client.get_inference_statistics("image_classifier_preprocess", as_json=True)["model_stats"][0]
    executions = int(stats["execution_count"]) - int(stats_before["execution_count"])
    inferences = int(stats["inference_count"]) - int(stats_before["inference_count"])
    assert executions < inferences, "no dynamic batch held more than one request: the test proved nothing"
    assert stub_processes(triton_server.process.pid) == stubs_before
    assert client.is_server_live() and client.is_server_ready()
    for model in ("image_classifier", "image_classifier_preprocess", "image_classifier_core", "image_classifier_postprocess"):
        assert client.is_model_ready(model), model


# --------------------------------------------------------------------------- limits and admin surface


def test_limits_are_set_in_the_configs(built_repository, limits):
    """Bytes and pixels per image, and images per request, are bounded by configuration."""
    assert 0 < limits.max_bytes <= 64 * 2**20
    assert 0 < limits.max_pixels <= 100_000_000
    for pipeline in layout.pipelines(built_repository):
        ensemble = model_config.load_config(pipeline.ensemble_dir)
        assert ensemble.max_batch_size > 0
        for step in ensemble.ensemble_scheduling.step:
            composing = model_config.load_config(pipeline.repository / step.model_name, "cpu")
            assert 0 < ensemble.max_batch_size <= composing.max_batch_size, step.model_name
            if composing.backend == "python" and "layout" in composing.parameters:
                assert preprocessing.limits_from_config(composing).max_pixels <= 100_000_000, step.model_name


def test_request_parameters_cannot_redirect_files(triton_server, photo_bytes):
    """Nothing a client sends names a file: parameters that look like config keys are ignored."""
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    parameters = {"labels_file": "/etc/passwd", "onnx_file": "/etc/shadow", "model_repository": "/"}
    result = client.infer(MODEL, [image_tensor(grpcclient, [photo_bytes["coffee"]])], parameters=parameters)
    assert result.as_numpy("LABELS")[0, 0].decode() in GOLDEN_LABELS["coffee"]


def test_server_file_paths_cannot_be_set_over_the_network(triton_server, tmp_path):
    """Triton 2.51 refuses log and trace file locations from clients (501), even with the admin key; nothing is written."""
    for path, body in (
        ("/v2/logging", {"log_file": str(tmp_path / "client.log")}),
        ("/v2/trace/setting", {"trace_file": str(tmp_path / "client.trace"), "trace_level": ["TIMESTAMPS"]}),
    ):
        status, message = http_post(triton_server, path, body, admin_http_headers())
        assert status == 501 and "can not be updated through network protocol" in message, (path, status, message)
    assert list(tmp_path.iterdir()) == []


def test_model_control_is_off(triton_server):
    """The Deployment's --model-control-mode=none: load and unload requests are refused, even with the
    admin key, and the models stay."""
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    admin = admin_grpc_headers()
    for call in (
        lambda: client.load_model("image_classifier_core", headers=admin),
        lambda: client.unload_model("image_classifier_core", headers=admin),
    ):
        with pytest.raises(InferenceServerException, match="not allowed"):
            call()
    assert client.is_model_ready("image_classifier_core") and client.is_model_ready(MODEL)


def http_post(server, path: str, body: dict, headers: dict | None = None) -> tuple[int, str]:
    request = urllib.request.Request(
        f"http://{server.http_url}{path}", data=json.dumps(body).encode(), headers=headers or {}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_restricted_admin_apis_need_the_key(triton_server, photo_bytes):
    """The Deployment's --http-restricted-api / --grpc-restricted-protocol: model control, shared-memory
    registration, log and trace settings need the key (gRPC sends it as
    'triton-grpc-protocol-<header>'); inference and health do not."""
    shm = {"key": "/triton_test_region", "offset": 0, "byte_size": 64}
    for headers in ({}, {ADMIN_HEADER: "wrong"}):
        assert http_post(triton_server, "/v2/repository/index", {}, headers)[0] == 403
        assert http_post(triton_server, "/v2/repository/models/image_classifier_core/unload", {}, headers)[0] == 403
        assert http_post(triton_server, "/v2/systemsharedmemory/region/r/register", shm, headers)[0] == 403
        assert http_post(triton_server, "/v2/logging", {"log_verbose_level": 3}, headers)[0] == 403
        assert http_post(triton_server, "/v2/trace/setting", {"trace_rate": "1"}, headers)[0] == 403
    status, body = http_post(triton_server, "/v2/repository/index", {}, admin_http_headers())
    assert status == 200 and '"image_classifier_core"' in body

    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    plain = {ADMIN_HEADER.lower(): ADMIN_KEY}  # the HTTP header's name is not the gRPC metadata key
    wrong = dict.fromkeys(admin_grpc_headers(), "wrong")
    for headers in ({}, plain, wrong):
        with pytest.raises(InferenceServerException, match="restricted") as error:
            client.unload_model("image_classifier_core", headers=headers)
        assert "UNAVAILABLE" in str(error.value.status())
        with pytest.raises(InferenceServerException, match="restricted"):
            client.register_system_shared_memory("r", "/triton_test_region", 64, headers=headers)
    assert {m.name for m in client.get_model_repository_index(headers=admin_grpc_headers()).models} >= {"image_classifier_core", MODEL}

    # Inference and health stay open, and nothing was unloaded.
    result = client.infer(MODEL, [image_tensor(grpcclient, [photo_bytes["coffee"]])])
    assert result.as_numpy("LABELS")[0, 0].decode() in GOLDEN_LABELS["coffee"]
    assert client.is_server_ready() and client.is_model_ready("image_classifier_core")
