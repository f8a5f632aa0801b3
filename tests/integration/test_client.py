"""The client CLI (devtools/client.py with devtools/clients/classification.py as ./scripts/classify, the other tasks' clients share it)
and the curl example, on a real tritonserver."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from devtools import client, clients
from devtools.loadgen import free_port
from vision_serving import layout, model_config
from vision_serving.tasks import registry

REPOSITORY_ROOT = layout.REPOSITORY_ROOT
CLASSIFICATION = registry.task("classification")
CAT_LABELS = {"tiger cat", "Egyptian cat", "tabby"}

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def photo_dir(tmp_path_factory, photo_bytes: dict[str, bytes]) -> Path:
    folder = tmp_path_factory.mktemp("photos")
    (folder / "chelsea.png").write_bytes(photo_bytes["chelsea"])
    (folder / "coffee.png").write_bytes(photo_bytes["coffee"])
    return folder


def url_for(server, protocol: str) -> str:
    return server.grpc_url if protocol == "grpc" else server.http_url


def classify(argv: list[str]) -> int:
    """``./scripts/classify ARGV`` in process (its program name and default model found from the task)."""
    return client.script_main("classification", argv)


def run_json(capsys, argv: list[str]) -> tuple[int, list[dict], str]:
    code = classify([*argv, "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_table_output_classifies_real_photos(triton_server, photo_dir, protocol, capsys):
    files = [str(photo_dir / "chelsea.png"), str(photo_dir / "coffee.png")]
    code = classify(["--protocol", protocol, "--url", url_for(triton_server, protocol), *files])
    out = capsys.readouterr().out
    assert code == 0
    chelsea, coffee = out.split("\n\n")
    assert chelsea.splitlines()[0] == files[0]
    assert "rank" in chelsea.splitlines()[1] and "class id" in chelsea.splitlines()[1]
    top_cat = chelsea.splitlines()[2]
    assert top_cat.split()[0] == "1" and any(label in top_cat for label in CAT_LABELS)
    assert "espresso" in coffee.splitlines()[2] and "%" in coffee.splitlines()[2]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_json_output_and_top_k(triton_server, photo_dir, protocol, capsys):
    url = url_for(triton_server, protocol)
    code, results, _ = run_json(capsys, ["--protocol", protocol, "--url", url, "--top-k", "3", str(photo_dir)])
    assert code == 0
    # The folder's images, sorted.
    assert [r["file"] for r in results] == [str(photo_dir / "chelsea.png"), str(photo_dir / "coffee.png")]
    chelsea, coffee = results
    assert all(len(r["predictions"]) == 3 for r in results)
    assert chelsea["predictions"][0]["label"] in CAT_LABELS
    assert coffee["predictions"][0]["label"] == "espresso"
    top = coffee["predictions"][0]
    assert isinstance(top["class_id"], int) and 0 < top["score"] <= 1
    scores = [p["score"] for p in chelsea["predictions"]]
    assert scores == sorted(scores, reverse=True)


def test_batching_gives_the_same_answers_as_single_requests(triton_server, photo_dir, capsys):
    files = [str(photo_dir / "chelsea.png"), str(photo_dir / "coffee.png")] * 3
    argv = ["--url", triton_server.grpc_url, *files]
    _, batched, _ = run_json(capsys, [*argv, "--batch-size", "4"])
    _, single, _ = run_json(capsys, [*argv, "--batch-size", "1"])
    assert [r["predictions"][0]["label"] for r in batched] == [r["predictions"][0]["label"] for r in single]
    for a, b in zip(batched, single):
        assert a["predictions"][0]["score"] == pytest.approx(b["predictions"][0]["score"], abs=1e-4)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_bad_file_is_reported_and_others_still_classified(triton_server, photo_bytes, tmp_path, protocol, capsys):
    (tmp_path / "a_good.png").write_bytes(photo_bytes["coffee"])
    (tmp_path / "b_bad.jpg").write_text("this is not a JPEG, just text\n")
    (tmp_path / "c_good.png").write_bytes(photo_bytes["chelsea"])
    (tmp_path / "notes.txt").write_text("not an image suffix: skipped in folders\n")
    url = url_for(triton_server, protocol)

    code, results, _ = run_json(capsys, ["--protocol", protocol, "--url", url, str(tmp_path)])
    assert code == 1
    assert [Path(r["file"]).name for r in results] == ["a_good.png", "b_bad.jpg", "c_good.png"]
    good, bad, cat = results
    assert good["predictions"][0]["label"] == "espresso"
    assert cat["predictions"][0]["label"] in CAT_LABELS
    assert "predictions" not in bad and bad["error"]

    # Table mode: the error goes to stderr, one line naming the file; the good files still print.
    code = classify(["--protocol", protocol, "--url", url, str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 1
    assert "espresso" in captured.out and "b_bad.jpg" not in captured.out
    [error_line] = captured.err.strip().splitlines()
    assert error_line == f"classify: error: {tmp_path / 'b_bad.jpg'}: {bad['error']}"


def test_missing_file_is_reported_for_that_file(triton_server, photo_dir, tmp_path, capsys):
    missing = str(tmp_path / "missing.png")
    code, results, _ = run_json(capsys, ["--url", triton_server.grpc_url, missing, str(photo_dir / "coffee.png")])
    assert code == 1
    assert results[0] == {"file": missing, "error": "No such file or directory"}
    assert results[1]["predictions"][0]["label"] == "espresso"


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_unreachable_server_exits_2_with_one_line(photo_dir, protocol, capsys):
    url = f"localhost:{free_port()}"
    code = classify(["--protocol", protocol, "--url", url, "--timeout", "10", "--deadline", "0", str(photo_dir)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    [line] = captured.err.strip().splitlines()
    assert line.startswith(f"classify: error: cannot reach Triton at {url} ({protocol})")


def test_unknown_model_exits_2(triton_server, photo_dir, capsys):
    code = classify(["--url", triton_server.grpc_url, "--model", "no_such_model", str(photo_dir)])
    assert code == 2
    assert "model 'no_such_model' is not ready" in capsys.readouterr().err


def test_pipeline_interface_is_read_from_the_server(triton_server):
    """The task comes from the postprocess step's ``task`` parameter, the tensors from the ensemble's config, by role."""
    connection = client.TritonConnection("grpc", triton_server.grpc_url, timeout=10)
    try:
        interface = connection.pipeline_interface("image_classifier")
        assert dataclasses.replace(interface, task_parameters={}) == client.PipelineInterface(
            name="image_classifier",
            task=CLASSIFICATION,
            image_input="IMAGE",
            request_inputs={"top_k": "TOP_K"},
            outputs={"labels": "LABELS", "scores": "SCORES", "class_ids": "CLASS_IDS"},
            max_batch_size=32,
        )
        # The postprocess step's parameters, as served (what a client may read, e.g. the keypoints' names).
        postprocess = model_config.load_config(layout.pipeline("image_classifier").model_dir("postprocess"))
        assert interface.task_parameters["task"] == "classification"
        assert interface.task_parameters["top_k"] == model_config.parameter(postprocess, "top_k")
        assert connection.pipeline_interface("face_detector").task is registry.task("detection")
        with pytest.raises(client.ClientError, match="model 'person_segmenter' is a segmentation pipeline, not classification"):
            connection.pipeline_interface("person_segmenter", CLASSIFICATION)
        with pytest.raises(client.ClientError, match="model 'image_classifier_core' is not a pipeline of this bundle"):
            connection.pipeline_interface("image_classifier_core")
    finally:
        connection.close()


def test_the_wrong_client_for_a_pipeline_exits_2(triton_server, photo_dir, capsys):
    assert classify(["--url", triton_server.grpc_url, "--model", "face_detector", str(photo_dir)]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "classify: error: model 'face_detector' is a detection pipeline, not classification: use its own client"
    )


def test_the_generic_entry_and_the_generic_client_on_a_real_pipeline(triton_server, photo_dir, capsys, monkeypatch):
    """``python -m devtools.client --task NAME`` runs the task's own client; a task without one (here: the
    classification client hidden) gets the generic client, which gives every output of the pipeline."""
    coffee = str(photo_dir / "coffee.png")
    argv = ["--task", "classification", "--url", triton_server.grpc_url, "--json", coffee]
    assert client.main([*argv, "--top-k", "2"]) == 0
    [record] = json.loads(capsys.readouterr().out)
    assert record["predictions"][0]["label"] == "espresso" and len(record["predictions"]) == 2
    monkeypatch.setattr(client.clients, "client_for", lambda name: clients.GENERIC)
    assert client.main(argv) == 0
    [record] = json.loads(capsys.readouterr().out)
    outputs = record["outputs"]
    assert list(outputs) == ["labels", "scores", "class_ids"] and outputs["labels"][0] == "espresso"
    assert len(outputs["labels"]) == len(outputs["scores"]) == len(outputs["class_ids"]) == 5  # the config's top_k
    assert outputs["scores"] == sorted(outputs["scores"], reverse=True) and isinstance(outputs["class_ids"][0], int)
    assert client.main([*argv[:-2], coffee]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == coffee and table[1].split()[:2] == ["labels", "[5]"] and "'espresso'" in table[1]


def test_shell_wrapper_resolves_paths_from_the_callers_directory(triton_server, photo_dir):
    result = subprocess.run(
        [str(REPOSITORY_ROOT / "scripts" / "classify"), "--url", triton_server.grpc_url, "--json", "coffee.png"],
        cwd=photo_dir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    [coffee] = json.loads(result.stdout)
    assert coffee["file"] == "coffee.png" and coffee["predictions"][0]["label"] == "espresso"


def test_curl_example(triton_server, photo_dir):
    result = subprocess.run(
        [str(REPOSITORY_ROOT / "scripts" / "curl_infer.sh"), str(photo_dir / "chelsea.png"), triton_server.http_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    response = json.loads(result.stdout)
    outputs = {output["name"]: output for output in response["outputs"]}
    assert outputs["LABELS"]["datatype"] == "BYTES" and outputs["LABELS"]["shape"][0] == 1
    assert outputs["LABELS"]["data"][0] in CAT_LABELS
    scores = outputs["SCORES"]["data"]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1


def test_curl_example_reports_a_bad_image(triton_server, tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_text("not an image")
    result = subprocess.run(
        [str(REPOSITORY_ROOT / "scripts" / "curl_infer.sh"), str(bad), triton_server.http_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "error" in json.loads(result.stdout)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_refused_connection_is_retried_until_the_deadline(photo_dir, protocol, capsys):
    """No server on the port: the real tritonclient's refusal (gRPC UNAVAILABLE, HTTP ConnectionRefusedError)
    is retried with backoff for --deadline seconds, then reported as unreachable (exit 2)."""
    import time

    started = time.monotonic()
    code = classify(["--protocol", protocol, "--url", f"localhost:{free_port()}", "--deadline", "1.5", str(photo_dir)])
    elapsed = time.monotonic() - started
    assert code == 2 and "cannot reach" in capsys.readouterr().err
    assert 0.5 < elapsed < 1.5 + 3, elapsed  # retried (not one attempt), gave up by the deadline
