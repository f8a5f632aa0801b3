"""Sender factories for the load generator, one per system under test, and the naive service's process.

Every sender checks its answer: a response without one of the pipeline's outputs (for one image:
a batch dimension of 1) is a wrong answer, counted as an error.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype

from devtools.loadgen import Sender, SenderFactory, WrongAnswer, free_port
from devtools.triton_server import REPOSITORY_ROOT
from vision_serving import layout, model_config

CLIENT_TIMEOUT_S = 120.0


def output_names(pipeline: layout.Pipeline) -> list[str]:
    """The ensemble's outputs, from its config."""
    return [tensor.name for tensor in model_config.load_config(pipeline.ensemble_dir).output]


def core_outputs(pipeline: layout.Pipeline) -> list[str]:
    return [tensor.name for tensor in model_config.load_config(pipeline.core_dir, "cpu").output]


def check_answer(as_numpy: Any, names: list[str]) -> None:
    """Every output present with one image's batch dimension (``as_numpy``: the result's accessor)."""
    for name in names:
        value = as_numpy(name)
        if value is None or value.shape[:1] != (1,):
            raise WrongAnswer(f"{name}: {None if value is None else value.shape}, expected one image's answer")


def ensemble_sender(url: str, pipeline: layout.Pipeline, payloads: list[bytes], protocol: str = "grpc") -> SenderFactory:
    """Closed-loop sender for a pipeline's ensemble: one encoded image per request (BYTES [1, 1])."""
    module: Any = grpcclient if protocol == "grpc" else httpclient
    image_name = model_config.image_input_name(model_config.load_config(pipeline.ensemble_dir))
    names = output_names(pipeline)

    def factory(worker: int) -> Sender:
        if protocol == "grpc":
            client: Any = grpcclient.InferenceServerClient(url)
            options: dict[str, Any] = {"client_timeout": CLIENT_TIMEOUT_S}
        else:
            client = httpclient.InferenceServerClient(url, connection_timeout=CLIENT_TIMEOUT_S, network_timeout=CLIENT_TIMEOUT_S)
            options = {}
        # Inputs are built once per worker and reused: the client's own cost stays small.
        prepared = []
        for data in payloads:
            tensor = module.InferInput(image_name, [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[data]], dtype=np.object_))
            prepared.append([tensor])

        def send(index: int) -> None:
            result = client.infer(pipeline.name, prepared[index % len(prepared)], **options)
            check_answer(result.as_numpy, names)

        return send

    return factory


def core_sender(url: str, pipeline: layout.Pipeline, feeds: dict[str, np.ndarray]) -> SenderFactory:
    """The core alone over gRPC: already-preprocessed tensors (``feeds``: the core's inputs for N images),
    one image per request, in the core's input types."""
    names = core_outputs(pipeline)
    count = len(next(iter(feeds.values())))

    def factory(worker: int) -> Sender:
        client = grpcclient.InferenceServerClient(url)
        prepared = []
        for index in range(count):
            inputs = []
            for name, value in feeds.items():
                row = np.ascontiguousarray(value[index : index + 1])
                tensor = grpcclient.InferInput(name, list(row.shape), np_to_triton_dtype(row.dtype))
                tensor.set_data_from_numpy(row)
                inputs.append(tensor)
            prepared.append(inputs)

        def send(index: int) -> None:
            result = client.infer(pipeline.model_name("core"), prepared[index % len(prepared)], client_timeout=CLIENT_TIMEOUT_S)
            check_answer(result.as_numpy, names)

        return send

    return factory


def naive_sender(port: int, pipeline: layout.Pipeline, payloads: list[bytes]) -> SenderFactory:
    """The naive service: POST the raw image bytes, keep-alive connection per worker."""
    names = set(output_names(pipeline))

    def factory(worker: int) -> Sender:
        state = {"connection": http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)}
        headers = {"Content-Type": "application/octet-stream"}

        def send(index: int) -> None:
            connection = state["connection"]
            try:
                connection.request("POST", "/infer", body=payloads[index % len(payloads)], headers=headers)
                response = connection.getresponse()
                body = response.read()
            except (http.client.HTTPException, OSError):
                connection.close()
                state["connection"] = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)
                raise
            if response.status != 200:
                raise WrongAnswer(f"HTTP {response.status}: {body[:200]!r}")
            if set(json.loads(body)) != names:
                raise WrongAnswer(f"outputs {sorted(json.loads(body))}, expected {sorted(names)}")

        return send

    return factory


def naive_service_available() -> str | None:
    """None if the naive service can run, else why not."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as error:
        return f"{error.name} is not installed (they come with requirements/dev.txt: scripts/bootstrap.sh)"
    return None


class NaiveService:
    """``uvicorn benchmarks.naive_service:app --workers 1`` on a free port, as a child process."""

    def __init__(self, pipeline: layout.Pipeline, log_file: Path, tuned: bool = False, core_config: str | None = None) -> None:
        """``tuned``: the served thread settings instead of the libraries' defaults; ``core_config``: the core's
        config variant (e.g. cpu_openvino) instead of configs/cpu.pbtxt."""
        self.port = free_port()
        self.pipeline = pipeline
        self.tuned = tuned
        self.core_config = core_config
        self.log_file = log_file
        self.process: subprocess.Popen | None = None
        self.log: BinaryIO | None = None

    def start(self) -> None:
        env = dict(
            os.environ,
            BENCH_PIPELINE=str(self.pipeline.repository),
            BENCH_NAIVE_TUNED="1" if self.tuned else "0",
            BENCH_CORE_CONFIG=self.core_config or "cpu",
            PYTHONPATH=str(REPOSITORY_ROOT),
        )
        command = [sys.executable, "-m", "uvicorn", "benchmarks.naive_service:app", "--host", "127.0.0.1", "--port", str(self.port)]
        command += ["--workers", "1", "--log-level", "warning", "--no-access-log"]
        self.log = open(self.log_file, "ab")  # noqa: SIM115 - open for the life of the service, closed in stop()
        self.process = subprocess.Popen(command, env=env, cwd=REPOSITORY_ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the naive service exited with code {self.process.returncode}; see {self.log_file}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the naive service was not ready within 120 s; see {self.log_file}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log is not None:
            self.log.close()
