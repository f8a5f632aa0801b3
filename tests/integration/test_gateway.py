"""The image gateway against the run's shared tritonserver (restricted as the Deployment restricts it: the gateway holds
no admin key): every pipeline served and described, answers equal to the same pipeline called over gRPC, the photo in
every form, options, errors, URL input refused where it must be, keys, CORS and metrics."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import threading
import time
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from openapi_spec_validator import validate as validate_openapi

from devtools.loadgen import GOLDEN_LABELS
from gateway import access
from tests.support.gateway import PHOTO_HOST, GatewayProcess, multipart, request
from vision_serving import layout

PIPELINES = [pipeline.name for pipeline in layout.pipelines(layout.MODEL_REPOSITORY)]
# A photo each pipeline has something to say about.
PHOTOS = {"image_classifier": "chelsea", "face_detector": "astronaut", "person_segmenter": "astronaut", "text_reader": "page"}
FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "gateway" / "answer_schemas"


def post(gateway, pipeline: str, photo: bytes, fields: dict[str, str] | None = None, query: str = "", headers=None):
    data, content_type = multipart(fields or {}, photo)
    return request(f"{gateway.url}/v1/pipelines/{pipeline}{query}", data, {**content_type, **(headers or {})})


def grpc_outputs(triton_server, pipeline: str, photo: bytes) -> dict[str, np.ndarray]:
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[photo]], dtype=np.object_))
    result = client.infer(pipeline, [image])
    names = [output["name"] for output in result.get_response(as_json=True)["outputs"]]
    return {name: result.as_numpy(name)[0] for name in names}


@pytest.fixture(scope="module")
def document(gateway):
    status, body = request(f"{gateway.url}/openapi.json")
    assert status == 200
    return body


def test_every_pipeline_of_the_server_is_listed_and_has_its_path(gateway, document):
    status, body = request(f"{gateway.url}/v1/pipelines")
    assert status == 200
    assert [p["name"] for p in body["pipelines"]] == sorted(PIPELINES)
    assert {f"/v1/pipelines/{name}" for name in PIPELINES} <= set(document["paths"])


def test_the_openapi_document_validates_and_holds_each_answer_schema_as_committed(document):
    validate_openapi(document)
    assert document["openapi"].startswith("3.")
    for name in PIPELINES:
        fixture = json.loads((FIXTURES / f"{name}.json").read_text())
        assert document["components"]["schemas"][f"{name}.answer"] == fixture, (
            f"{name}: the served schema differs from {FIXTURES.name}/{name}.json"
        )


def answer_validator(document, pipeline: str) -> jsonschema.Draft202012Validator:
    schema = {"$ref": f"#/components/schemas/{pipeline}.answer", "components": document["components"]}
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_the_answer_is_the_grpc_answer_in_json(gateway, triton_server, photo_bytes, document, pipeline):
    photo = photo_bytes[PHOTOS[pipeline]]
    status, answer = post(gateway, pipeline, photo, {"raw": "true"})
    assert status == 200, answer
    answer_validator(document, pipeline).validate(answer)
    assert answer["pipeline"] == pipeline
    direct = grpc_outputs(triton_server, pipeline, photo)
    assert set(answer["tensors"]) == set(direct)
    if pipeline == "image_classifier":
        assert [c["label"] for c in answer["classes"]] == [label.decode() for label in direct["LABELS"]]
        assert np.allclose([c["score"] for c in answer["classes"]], direct["SCORES"], atol=1e-6)
        assert answer["classes"][0]["label"] in GOLDEN_LABELS["chelsea"]
    elif pipeline == "face_detector":
        count = int(direct["COUNT"][0])
        assert count >= 1 and len(answer["detections"]) == count
        assert np.allclose([d["box"] for d in answer["detections"]], direct["BOXES"][:count], atol=0.006)
        assert [d["label"] for d in answer["detections"]] == [label.decode() for label in direct["LABELS"][:count]]
        assert np.allclose([d["keypoints"] for d in answer["detections"]], direct["KEYPOINTS"][:count], atol=0.006)
    elif pipeline == "person_segmenter":
        assert base64.b64decode(answer["mask"]["png"]) == bytes(direct["MASK"][0])
        assert answer["coverage"] == pytest.approx(float(direct["COVERAGE"][0]), abs=1e-6)
    else:
        count = int(direct["COUNT"][0])
        assert [line["text"] for line in answer["lines"]] == [text.decode() for text in direct["TEXTS"][:count]]
        assert np.allclose([line["corners"] for line in answer["lines"]], direct["BOXES"][:count], atol=0.006)
        assert "Region-based segmentation" in [line["text"] for line in answer["lines"]]


def test_the_photo_arrives_in_every_form_with_the_same_answer(gateway, photo_bytes, photo_server):
    photo = photo_bytes["coffee"]
    url = f"{gateway.url}/v1/pipelines/image_classifier"
    answers = [
        post(gateway, "image_classifier", photo),
        request(url, photo, {"Content-Type": "image/png"}),
        request(url, photo, {"Content-Type": "application/octet-stream"}),
        request(url, json.dumps({"image": base64.b64encode(photo).decode()}).encode(), {"Content-Type": "application/json"}),
        request(url, json.dumps({"url": photo_server.url("coffee.jpg")}).encode(), {"Content-Type": "application/json"}),
        post(gateway, "image_classifier", None, {"url": photo_server.url("coffee.jpg")}),
    ]
    assert [status for status, _ in answers] == [200] * len(answers), answers
    assert all(body["classes"] == answers[0][1]["classes"] for _, body in answers)
    assert "/coffee.jpg" in photo_server.requests


def test_options_as_fields_or_query_parameters_are_checked_and_sent(gateway, photo_bytes):
    photo = photo_bytes["chelsea"]
    assert len(post(gateway, "image_classifier", photo, {"top_k": "3"})[1]["classes"]) == 3
    assert len(post(gateway, "image_classifier", photo, query="?top_k=7")[1]["classes"]) == 7
    url = f"{gateway.url}/v1/pipelines/image_classifier"
    status, body = request(
        url, json.dumps({"image": base64.b64encode(photo).decode(), "top_k": 2}).encode(), {"Content-Type": "application/json"}
    )
    assert status == 200 and len(body["classes"]) == 2
    strict = post(gateway, "face_detector", photo_bytes["astronaut"], {"score_threshold": "0.99"})[1]["detections"]
    assert strict == []
    refused = {
        "top_k 0": post(gateway, "image_classifier", photo, {"top_k": "0"}),
        "top_k 1001": post(gateway, "image_classifier", photo, query="?top_k=1001"),
        "top_k text": post(gateway, "image_classifier", photo, {"top_k": "three"}),
        "unknown": post(gateway, "image_classifier", photo, {"topk": "3"}),
        "threshold 1.5": post(gateway, "face_detector", photo, {"score_threshold": "1.5"}),
        "mask format": post(gateway, "person_segmenter", photo, {"mask_format": "jpeg"}),
        "twice": post(gateway, "image_classifier", photo, {"top_k": "3"}, query="?top_k=4"),
    }
    for case, (status, body) in refused.items():
        assert status == 400 and body["error"]["code"] == "INVALID_ARG", (case, body)
    assert "[1, 1000]" in refused["top_k 0"][1]["error"]["message"]
    assert "topk" in refused["unknown"][1]["error"]["message"]


def test_a_mask_comes_as_coco_rle_on_request(gateway, photo_bytes):
    from gateway.answers.masks import decode_rle
    from vision_serving.tasks.segmentation import decode_png

    png = post(gateway, "person_segmenter", photo_bytes["astronaut"])[1]
    rle = post(gateway, "person_segmenter", photo_bytes["astronaut"], {"mask_format": "rle"})[1]
    mask = decode_png(base64.b64decode(png["mask"]["png"])) > 0
    assert np.array_equal(decode_rle(rle["mask"]["rle"]).astype(bool), mask)
    assert rle["coverage"] == png["coverage"] == pytest.approx(mask.mean(), abs=1e-6)


def raw_exchange(gateway, head: bytes, body: bytes = b"", wait_s: float = 10.0) -> tuple[bytes, float]:
    """What the gateway answers to ``head`` (and ``body``) on a plain socket, and how long it took to answer."""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=wait_s) as sock:
        started = time.monotonic()
        sock.sendall(head + body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer, time.monotonic() - started


def test_an_oversized_upload_is_413_before_its_body_is_sent(gateway):
    """A declared length over the pipeline's limit (20 MiB) is refused at once: the gateway does not wait for a body that
    is never sent. A chunked upload without a length is cut off as it passes the limit."""
    head = b"POST /v1/pipelines/image_classifier HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\nContent-Length: 50000000\r\n\r\n"
    answer, took = raw_exchange(gateway, head)
    assert answer.startswith(b"HTTP/1.1 413") and took < 5, answer[:200]
    chunk = b"\xff" * 1_000_000
    chunked = b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(25)) + b"0\r\n\r\n"
    head = b"POST /v1/pipelines/image_classifier HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\nTransfer-Encoding: chunked\r\n\r\n"
    answer, _ = raw_exchange(gateway, head, chunked)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_errors_are_json_with_the_status_their_code_means(gateway, photo_bytes):
    url = f"{gateway.url}/v1/pipelines/image_classifier"
    truncated = photo_bytes["rocket"][:2000]  # a JPEG cut short: the pipeline refuses it
    cases = {
        "text/plain": (request(url, b"hello", {"Content-Type": "text/plain"}), 415, "UNSUPPORTED_MEDIA_TYPE"),
        "a GIF": (request(url, b"GIF89a" + b"\0" * 64, {"Content-Type": "image/gif"}), 415, "UNSUPPORTED_MEDIA_TYPE"),
        "no photo": (post(gateway, "image_classifier", None, {"top_k": "3"}), 400, "INVALID_ARG"),
        "truncated": (request(url, truncated, {"Content-Type": "image/jpeg"}), 400, "INVALID_ARG"),
        "bad JSON": (request(url, b"{", {"Content-Type": "application/json"}), 400, "INVALID_ARG"),
        "no pipeline": (request(f"{gateway.url}/v1/pipelines/nope", b"x", {"Content-Type": "image/jpeg"}), 404, "NOT_FOUND"),
        "GET": (request(url), 405, "METHOD_NOT_ALLOWED"),
    }
    for case, ((status, body), want_status, want_code) in cases.items():
        assert (status, body["error"]["code"]) == (want_status, want_code), (case, status, body)
        assert body["error"]["message"], case
    assert "GIF" in cases["a GIF"][0][1]["error"]["message"]
    assert "truncated" in cases["truncated"][0][1]["error"]["message"].lower()  # the pipeline's own message


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:{port}/coffee.jpg", "loopback"),
        ("http://169.254.169.254/latest/meta-data/", "port 80 is not one of"),
        ("http://169.254.169.254:{port}/latest/meta-data/", "metadata"),
        ("http://localhost:{port}/coffee.jpg", "localhost resolves to"),
        ("http://[::ffff:127.0.0.1]:{port}/coffee.jpg", "loopback"),
        ("http://{host}:{port}/redirect?to=http://127.0.0.1:{port}/coffee.jpg", "redirect 1"),
        ("ftp://{host}:{port}/coffee.jpg", "scheme"),
    ],
)
def test_urls_to_the_machine_and_its_networks_are_refused_naming_the_reason(gateway, photo_server, url, reason):
    target = url.format(port=photo_server.port, host=PHOTO_HOST)
    before = len(photo_server.requests)
    status, body = post(gateway, "image_classifier", None, {"url": target})
    assert status == 400 and reason in body["error"]["message"], body
    if "redirect" not in target:
        assert len(photo_server.requests) == before  # refused before any connection


def test_the_docs_and_the_page_load_nothing_from_elsewhere(gateway):
    for path in ("/", "/docs", "/static/page.js", "/static/docs.js", "/docs/assets/swagger-ui-bundle.js"):
        assert request(f"{gateway.url}{path}")[0] == 200, path
    for path in ("/", "/docs"):
        _, page = request(f"{gateway.url}{path}")
        assert b"http://" not in page and b"https://" not in page and b"//cdn" not in page


def test_metrics_count_each_route_and_status(gateway, photo_bytes):
    post(gateway, "image_classifier", photo_bytes["coffee"])
    post(gateway, "image_classifier", photo_bytes["coffee"], {"top_k": "0"})
    status, text = request(f"{gateway.url}/metrics")
    assert status == 200
    lines = text.decode().splitlines()
    for code in ("200", "400"):
        wanted = f'gateway_http_requests_total{{method="POST",pipeline="image_classifier",route="/v1/pipelines/{{name}}",status="{code}"}}'
        assert any(line.startswith(wanted) for line in lines), code
    assert any(line.startswith("gateway_http_request_duration_seconds_bucket{") for line in lines)


def test_without_the_server_the_gateway_answers_503_with_retry_after(photo_bytes, tmp_path):
    nothing = GatewayProcess(f"127.0.0.1:{_closed_port()}", log_file=tmp_path / "gateway.log")
    nothing.start(wait_for="/healthz")
    try:
        status, body = request(f"{nothing.url}/readyz")
        assert status == 503 and body["server_ready"] is False
        status, body = post(nothing, "image_classifier", photo_bytes["coffee"])
        assert status == 503 and body["error"]["code"] == "UNAVAILABLE", body
        # The catalogue's own pages too, each a 503 with Retry-After on one kept-alive connection (a 500 closed it).
        connection = http.client.HTTPConnection("127.0.0.1", nothing.port, timeout=30)
        for path in ("/v1/pipelines", "/openapi.json", "/v1/pipelines"):
            connection.request("GET", path)
            response = connection.getresponse()
            body = json.loads(response.read())
            assert response.status == 503 and response.getheader("Retry-After") == "1", (path, body)
            assert body["error"]["code"] == "UNAVAILABLE" and "cannot read the server's pipelines" in body["error"]["message"]
            assert response.getheader("Connection") != "close"
        connection.close()
    finally:
        nothing.stop()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def keyed_gateway(triton_server, tmp_path_factory):
    """A gateway with two keys (one with a burst of 2 and almost no rate) and CORS for one origin."""
    folder = tmp_path_factory.mktemp("keyed-gateway")
    keys = folder / "keys.toml"
    keys.write_text(
        f'[[key]]\nname = "app"\nsha256 = "{access.digest("app-key")}"\nrequests_per_second = 50\nburst = 50\nmax_concurrent = 4\n'
        f'[[key]]\nname = "slow"\nsha256 = "{access.digest("slow-key")}"\nrequests_per_second = 0.001\nburst = 2\nmax_concurrent = 1\n'
    )
    process = GatewayProcess(
        triton_server.grpc_url, ["--api-keys", str(keys), "--cors-origin", "https://app.example"], log_file=folder / "log"
    )
    process.start()
    yield process
    process.stop()


def test_api_keys_and_their_limits(keyed_gateway, photo_bytes):
    photo = photo_bytes["coffee"]
    assert post(keyed_gateway, "image_classifier", photo)[0] == 401
    assert post(keyed_gateway, "image_classifier", photo, headers={"X-API-Key": "wrong"})[0] == 403
    assert post(keyed_gateway, "image_classifier", photo, headers={"X-API-Key": "app-key"})[0] == 200
    slow = [post(keyed_gateway, "image_classifier", photo, headers={"X-API-Key": "slow-key"}) for _ in range(3)]
    assert [status for status, _ in slow] == [200, 200, 429]
    assert slow[2][1]["error"]["code"] == "TOO_MANY_REQUESTS"
    _, document = request(f"{keyed_gateway.url}/openapi.json")
    assert document["components"]["securitySchemes"]["ApiKey"]["name"] == "X-API-Key"


def test_the_concurrency_limit_of_a_key_answers_429(keyed_gateway, photo_bytes):
    """Key 'app' takes 4 requests in flight: of 8 sent at once to the slowest pipeline, some are refused with 429."""
    results: list[int] = []
    photo = photo_bytes["page"]

    def send() -> None:
        results.append(post(keyed_gateway, "text_reader", photo, headers={"X-API-Key": "app-key"})[0])

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(results) <= {200, 429} and results.count(200) >= 4 and 429 in results, results


def test_cors_only_for_the_configured_origin(keyed_gateway, gateway):
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-api-key"}
    import urllib.request

    def headers_of(url: str, headers: dict[str, str]) -> dict[str, str]:
        call = urllib.request.Request(url, headers=headers, method="OPTIONS")
        try:
            with urllib.request.urlopen(call, timeout=10) as response:
                return {k.lower(): v for k, v in response.headers.items()}
        except urllib.error.HTTPError as error:
            return {k.lower(): v for k, v in error.headers.items()}

    allowed = headers_of(f"{keyed_gateway.url}/v1/pipelines/image_classifier", preflight)
    assert allowed.get("access-control-allow-origin") == "https://app.example"
    other = headers_of(f"{keyed_gateway.url}/v1/pipelines/image_classifier", {**preflight, "Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other
    assert "access-control-allow-origin" not in headers_of(f"{gateway.url}/v1/pipelines/image_classifier", preflight)  # off by default


def test_the_answer_says_how_long_it_took_in_triton_and_in_the_gateway(gateway, photo_bytes):
    import urllib.request

    data, headers = multipart({}, photo_bytes["coffee"])
    call = urllib.request.Request(f"{gateway.url}/v1/pipelines/image_classifier", data=data, headers=headers)
    with urllib.request.urlopen(call, timeout=60) as response:
        timing = dict(part.strip().split(";dur=") for part in response.headers["Server-Timing"].split(","))
    assert set(timing) == {"triton", "gateway"} and float(timing["triton"]) > 0 and float(timing["gateway"]) >= 0
