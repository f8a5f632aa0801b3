"""The deployment on the real local tritonserver: the model image's content (devtools.model_image,
staged from the built repository) served THROUGH the image's entry script
(docker/tritonserver-pipelines.sh) with the Deployment's own flags: it accepts them, serves every
pipeline, the probe paths answer 200, the restricted APIs want the key, and every metric name used
by the alerts, the adapter rule and the dashboard exists on its /metrics (except the GPU-only ones).
The offline checks of the same manifests are tests/deploy/test_deployment.py.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from devtools import model_image
from tests.support.deployment import (
    ADMIN_KEY,
    DRIFT_BATCH,
    DRIFT_CONCURRENCY,
    ENTRY_COMMAND,
    GPU_ONLY_METRICS,
    LIVENESS_SCRIPT,
    PIPELINES,
    PROMETHEUS_BUILTINS,
    STEPS,
    used_metric_names,
)
from vision_serving import layout


@pytest.mark.integration
def test_the_model_image_holds_every_built_model_and_no_plan(model_image_context, laddered_repository, tmp_path):
    """What `devtools.model_image` stages from a repository after `builders all`: every pipeline, its served
    model with provenance, its configs and drift reference, and no plan (staged again here, as the image's
    build does; the shared server serves model_image_context, staged the same way when the run began)."""
    context = tmp_path / "model-image"
    assert model_image.main(["--model-repository", str(laddered_repository), "--output", str(context)]) == 0
    staged = context / model_image.STAGED_REPOSITORY
    assert [p.name for p in context.iterdir()] == [model_image.STAGED_REPOSITORY], "the whole build context"
    assert sorted(p.name for p in layout.pipelines(staged)) == sorted(p.name for p in PIPELINES)
    for pipeline in layout.pipelines(staged):
        served = pipeline.served_onnx()
        assert served is not None and layout.provenance_path(served).is_file(), pipeline.name
        assert (pipeline.core_dir / "configs" / "cpu.pbtxt").is_file() and not pipeline.plan.exists(), pipeline.name
        built = layout.pipeline(pipeline.name, laddered_repository)
        assert built.drift_reference.is_file() and pipeline.drift_reference.read_bytes() == built.drift_reference.read_bytes()
    shipped = {p.relative_to(staged) for p in staged.rglob("*") if p.is_file()}
    source = {
        p.relative_to(laddered_repository)
        for pipe in layout.pipelines(laddered_repository)
        for p in pipe.repository.rglob("*")
        if p.is_file()
    }
    assert shipped == {p for p in source if not model_image.excluded(p)}
    assert not any(p.name.endswith(".plan") or "__pycache__" in p.parts for p in shipped)
    assert (model_image_context / model_image.STAGED_REPOSITORY).is_dir()


def http_status(url: str, method: str = "GET", headers: dict[str, str] | None = None, data: bytes | None = None) -> int:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.integration
def test_probe_paths_answer_200_on_the_real_server(production_server, triton):
    for probe in ("startupProbe", "readinessProbe"):
        path = triton[probe]["httpGet"]["path"]
        assert http_status(f"http://{production_server.http_url}{path}") == 200, probe


@pytest.mark.integration
def test_the_liveness_script_passes_on_the_real_server(production_server, tmp_path):
    """The liveness exec, pointed at this server's process and HTTP port, passes twice (first run records the stubs)."""
    command = [
        "bash",
        str(LIVENESS_SCRIPT),
        f"--pid={production_server.process.pid}",
        f"--http-port={production_server.http_port}",
        f"--state={tmp_path / 'state'}",
    ]
    for _ in range(2):
        completed = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
        assert completed.returncode == 0, completed.stderr
    recorded = int((tmp_path / "state").read_text().split()[2])
    assert recorded >= 2 * len(PIPELINES), "each pipeline has Python-backend preprocess and postprocess stubs"


@pytest.mark.integration
def test_restricted_apis_want_the_admin_key(production_server):
    url = f"http://{production_server.http_url}/v2/repository/index"
    assert http_status(url, "POST", data=b"{}") == 403
    assert http_status(url, "POST", headers={"X-Triton-Admin-Key": ADMIN_KEY}, data=b"{}") == 200
    for pipeline in PIPELINES:
        assert http_status(f"http://{production_server.http_url}/v2/models/{pipeline.name}") == 200  # metadata stays open
        unload = f"http://{production_server.http_url}/v2/repository/models/{pipeline.model_name('core')}/unload"
        assert http_status(unload, "POST", headers={"X-Triton-Admin-Key": ADMIN_KEY}, data=b"{}") != 200  # model control is off


@pytest.mark.integration
def test_the_entry_script_serves_every_pipeline(production_server):
    """Every pipeline folder became a --model-repository: each ensemble and step is ready."""
    for pipeline in PIPELINES:
        for model in (pipeline.name, *(pipeline.model_name(role) for role in layout.ROLES)):
            assert http_status(f"http://{production_server.http_url}/v2/models/{model}/ready") == 200, model
    log = production_server.log_file.read_text(errors="replace")
    (line,) = [line for line in log.splitlines() if line.startswith(f"{ENTRY_COMMAND}: serving ")]
    assert f"serving {len(PIPELINES)} pipeline(s)" in line


@pytest.mark.integration
def test_metric_names_used_exist_on_the_real_server(production_server, objects, photo_bytes):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(production_server.http_url, concurrency=DRIFT_CONCURRENCY)
    used = used_metric_names(objects)
    assert used & GPU_ONLY_METRICS == GPU_ONLY_METRICS and used & PROMETHEUS_BUILTINS == PROMETHEUS_BUILTINS
    assert {name for name in used if name.startswith("vision_")} >= {"vision_drift_p_value", "vision_nonfinite_outputs_total"}
    # Every ensemble takes IMAGE (encoded bytes): one request fills its steps' nv_* metrics. The drift
    # p-values and window means (vision_*) appear once a model's window holds drift_min_samples images
    # and its worker thread has tested it: batches of DRIFT_BATCH images to every pipeline whose labels
    # are still missing, DRIFT_CONCURRENCY requests at a time (both CPUs busy), until they are there.
    # The pipelines differ tenfold in CPU time per photo (a text reader's detector at 736 pixels and
    # more against a 224x224 classifier), so a pipeline that is done gets no more requests: the
    # slowest one fills its windows alone.
    per_pipeline = ("vision_drift_p_value", "vision_feature_window_mean", "vision_nonfinite_outputs_total")
    waiting = list(PIPELINES)
    deadline = time.monotonic() + 420
    while True:
        image = httpclient.InferInput("IMAGE", [DRIFT_BATCH, 1], "BYTES")
        image.set_data_from_numpy(np.array([[photo_bytes["coffee"]]] * DRIFT_BATCH, dtype=np.object_))
        sent = [client.async_infer(pipeline.name, [image]) for pipeline in waiting for _ in range(DRIFT_CONCURRENCY)]
        for request in sent:
            try:
                request.get_result()
            except InferenceServerException as error:  # a request the queue policy timed out is load shed, as designed:
                assert "Request timeout expired" in str(error), error  # the windows fill from the next round
        with urllib.request.urlopen(f"http://localhost:{production_server.metrics_port}/metrics", timeout=10) as response:
            exposition = response.read().decode()
        exported = set(re.findall(r"^((?:nv|vision)_[a-z_]+?)(?:_count|_sum)?[{ ]", exposition, re.MULTILINE))
        exported |= set(re.findall(r"^# TYPE ((?:nv|vision)_[a-z_]+) ", exposition, re.MULTILINE))
        missing = used - GPU_ONLY_METRICS - PROMETHEUS_BUILTINS - exported
        # ... on every pipeline, with the alerts' labels (pipeline, model, feature).
        missing_labels = {
            pipeline.name: {
                f"{name}{{pipeline={pipeline.name}}}"
                for name in per_pipeline
                if not re.search(rf'^{name}{{[^}}]*pipeline="{pipeline.name}"', exposition, re.MULTILINE)
            }
            for pipeline in PIPELINES
        }
        missing |= set().union(*missing_labels.values())
        waiting = [pipeline for pipeline in PIPELINES if missing_labels[pipeline.name]] or list(PIPELINES)
        if not missing or time.monotonic() > deadline:
            break
    assert not missing, f"not on the server's /metrics: {sorted(missing)}"
    for step in STEPS:
        assert f'nv_inference_queue_summary_us{{model="{step}",version="1",quantile="0.95"}}' in exposition
