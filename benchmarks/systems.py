"""Sender factories for the load generator, one per system under test, and the naive service's process."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import BinaryIO

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype

from benchmarks import CLASSIFIER
from devtools.loadgen import Sender, SenderFactory
from devtools.triton_server import REPOSITORY_ROOT
from vision_serving import model_config

ENSEMBLE = CLASSIFIER.name
CORE = CLASSIFIER.model_name("core")
# Tensor names from the configs, as everywhere: the ensemble's image input and labels output, the core's I/O.
_ENSEMBLE_CONFIG = model_config.load_config(CLASSIFIER.ensemble_dir)
IMAGE_INPUT = model_config.image_input_name(_ENSEMBLE_CONFIG)
LABELS_OUTPUT = model_config.tensors_by_role(_ENSEMBLE_CONFIG).output("BYTES")
_CORE_CONFIG = model_config.load_config(CLASSIFIER.core_dir, "cpu")
CORE_INPUT, CORE_OUTPUT = _CORE_CONFIG.input[0].name, _CORE_CONFIG.output[0].name
CLIENT_TIMEOUT_S = 120.0


class WrongAnswer(RuntimeError):
    """A request succeeded at the transport level but its answer is malformed."""


def _check_labels(labels, top_k: int) -> None:
    if labels is None or labels.shape != (1, top_k):
        raise WrongAnswer(f"LABELS shape {None if labels is None else labels.shape}, expected (1, {top_k})")


def ensemble_sender(protocol: str, url: str, payloads: list[bytes], top_k: int) -> SenderFactory:
    """Closed-loop sender for the ensemble: one encoded image per request (BYTES [1, 1])."""
    module = grpcclient if protocol == "grpc" else httpclient

    def factory(worker: int) -> Sender:
        if protocol == "grpc":
            client = grpcclient.InferenceServerClient(url)

            def call(inputs):
                return client.infer(ENSEMBLE, inputs, client_timeout=CLIENT_TIMEOUT_S)
        else:
            client = httpclient.InferenceServerClient(url, connection_timeout=CLIENT_TIMEOUT_S, network_timeout=CLIENT_TIMEOUT_S)

            def call(inputs):
                return client.infer(ENSEMBLE, inputs)

        # Inputs are built once per worker and reused: the client's own cost stays small.
        prepared = []
        for data in payloads:
            tensor = module.InferInput(IMAGE_INPUT, [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[data]], dtype=np.object_))
            prepared.append([tensor])

        def send(index: int) -> None:
            result = call(prepared[index % len(prepared)])
            _check_labels(result.as_numpy(LABELS_OUTPUT), top_k)

        return send

    return factory


def core_sender(url: str, tensors: np.ndarray, num_classes: int) -> SenderFactory:
    """The core alone over gRPC: already-preprocessed [1, 3, 224, 224] tensors, in the core's input type
    (uint8 pixels: 151 KB each; the core's graph normalizes them)."""

    def factory(worker: int) -> Sender:
        client = grpcclient.InferenceServerClient(url)
        prepared = []
        for row in tensors:
            tensor = grpcclient.InferInput(CORE_INPUT, [1, *row.shape], np_to_triton_dtype(row.dtype))
            tensor.set_data_from_numpy(np.ascontiguousarray(row[None]))
            prepared.append([tensor])

        def send(index: int) -> None:
            result = client.infer(CORE, prepared[index % len(prepared)], client_timeout=CLIENT_TIMEOUT_S)
            logits = result.as_numpy(CORE_OUTPUT)
            if logits is None or logits.shape != (1, num_classes):
                raise WrongAnswer(f"logits shape {None if logits is None else logits.shape}")

        return send

    return factory


def naive_sender(port: int, payloads: list[bytes], top_k: int) -> SenderFactory:
    """The naive service: POST the raw JPEG bytes, keep-alive connection per worker."""

    def factory(worker: int) -> Sender:
        state = {"connection": http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)}
        headers = {"Content-Type": "application/octet-stream"}

        def send(index: int) -> None:
            connection = state["connection"]
            try:
                connection.request("POST", "/classify", body=payloads[index % len(payloads)], headers=headers)
                response = connection.getresponse()
                body = response.read()
            except (http.client.HTTPException, OSError):
                connection.close()
                state["connection"] = http.client.HTTPConnection("127.0.0.1", port, timeout=CLIENT_TIMEOUT_S)
                raise
            if response.status != 200:
                raise WrongAnswer(f"HTTP {response.status}: {body[:200]!r}")
            if len(json.loads(body)[LABELS_OUTPUT]) != top_k:
                raise WrongAnswer("wrong number of labels")

        return send

    return factory


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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

    def __init__(self, model_repository: Path, log_file: Path, tuned: bool = False, core_config: str | None = None) -> None:
        """``core_config``: the core's config variant (e.g. cpu_openvino) instead of onnxruntime."""
        self.port = free_port()
        self.tuned = tuned
        self.core_config = core_config
        self.model_repository = model_repository
        self.log_file = log_file
        self.process: subprocess.Popen | None = None
        self.log: BinaryIO | None = None

    def start(self) -> None:
        env = dict(
            os.environ,
            BENCH_MODEL_REPOSITORY=str(self.model_repository),
            BENCH_NAIVE_TUNED="1" if self.tuned else "0",
            BENCH_CORE_CONFIG=self.core_config or "cpu",
            PYTHONPATH=str(REPOSITORY_ROOT),
        )
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "benchmarks.naive_service:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
            "--log-level",
            "warning",
            "--no-access-log",
        ]
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
