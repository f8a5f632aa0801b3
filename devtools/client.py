"""Classify image files with the image_classifier ensemble on a running Triton server.

    python -m scripts.classify PATH [PATH ...] [--protocol grpc|http] [--url HOST:PORT]
                               [--model image_classifier] [--top-k N] [--batch-size N]
                               [--recursive] [--json] [--timeout SECONDS] [--deadline SECONDS]

PATH is an image file or a folder (its *.jpg, *.jpeg and *.png files, sorted;
--recursive descends into subfolders). Files are sent as encoded bytes, several
per request (--batch-size). Tensor names are not hard-coded: they are read from
the server's model metadata (the BYTES input is the image, the INT32 input the
optional top-k; the BYTES, FP32 and INT32 outputs are labels, scores and class
ids).

Server calls that fail with UNAVAILABLE (gRPC UNAVAILABLE, HTTP 503: a full model
queue, a server shutting down, or over gRPC a refused connection) or whose
connection is refused are retried with jittered exponential backoff until
--deadline seconds have passed since the call's first attempt (0: no retries);
nothing else is retried (see RetryPolicy).

Exit codes: 0 all files classified, 1 some file failed (each error is reported
for its own file), 2 the server is not reachable or ready, or the model does not
look like an image classifier.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
DEFAULT_URLS = {"grpc": "localhost:8001", "http": "localhost:8000"}
# How each protocol reports Triton's INVALID_ARG: the server rejected this input.
INVALID_ARG_STATUSES = {"StatusCode.INVALID_ARGUMENT", "400"}


class ClassifyError(RuntimeError):
    """The run cannot go on (server unreachable or not ready, unexpected model): exit 2."""


@dataclass(frozen=True)
class ModelInterface:
    """The tensors of a classification model, found by datatype in its metadata."""

    name: str
    image_input: str
    top_k_input: str | None
    labels_output: str
    scores_output: str
    class_ids_output: str
    max_batch_size: int


@dataclass(frozen=True)
class Prediction:
    label: str
    score: float
    class_id: int


@dataclass
class FileResult:
    file: str
    predictions: list[Prediction] | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"file": self.file, "error": self.error}
        return {
            "file": self.file,
            "predictions": [{"label": p.label, "score": p.score, "class_id": p.class_id} for p in self.predictions or []],
        }


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def error_message(error: Exception) -> str:
    """The server's own message, without the client's '[status]' prefix."""
    if isinstance(error, InferenceServerException):
        return one_line(error.message() or str(error))
    return one_line(str(error) or type(error).__name__)


def is_invalid_arg(error: Exception) -> bool:
    return isinstance(error, InferenceServerException) and error.status() in INVALID_ARG_STATUSES


# How each protocol reports Triton's UNAVAILABLE: the server could not take the request now (a full
# model queue rejected it, the server is stopping, or, over gRPC, no connection could be made).
UNAVAILABLE_STATUSES = {"StatusCode.UNAVAILABLE", "503"}
DEFAULT_DEADLINE_S = 10.0


def is_retryable(error: BaseException) -> bool:
    """UNAVAILABLE, or a refused connection; nothing else.

    Both mean the server did not run the request, so sending it again is safe and another replica
    (or this one, once its queue drains or it has restarted) can answer. A refused connection is
    what a restarting pod or a server still starting looks like over HTTP (gRPC reports it as
    UNAVAILABLE already). Not retried: DEADLINE_EXCEEDED/timeouts (the server may still be working
    on it; more copies add load to an overloaded server), INVALID_ARGUMENT/NOT_FOUND (the same
    answer again), INTERNAL (a server fault: report it).
    """
    if isinstance(error, InferenceServerException):
        return str(error.status()) in UNAVAILABLE_STATUSES
    return isinstance(error, ConnectionRefusedError)


@dataclass
class RetryPolicy:
    """Jittered exponential backoff within a deadline ("full jitter": sleep uniform(0, min(cap, base * 2**n))).

    A call is attempted, then retried after each retryable failure until ``deadline_s`` after the
    first attempt (the last pause is cut to the time left); then the last error is raised. ``deadline_s=0``
    disables retries. ``clock``, ``sleep`` and ``rng`` are injectable for tests.
    """

    deadline_s: float = DEFAULT_DEADLINE_S
    base_s: float = 0.1
    cap_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    retries: int = 0  # retries made so far, over every call (reported by tests and tools)

    def backoff_s(self, attempt: int) -> float:
        return self.rng.uniform(0.0, min(self.cap_s, self.base_s * 2**attempt))

    def call(self, function: Callable[[], Any]) -> Any:
        started = self.clock()
        attempt = 0
        while True:
            try:
                return function()
            except Exception as error:
                if not is_retryable(error):
                    raise
                remaining = self.deadline_s - (self.clock() - started)
                if remaining <= 0:
                    raise
                # The last pause is cut to what is left, so every call keeps trying until its deadline.
                pause = min(self.backoff_s(attempt), remaining)
            self.sleep(pause)
            attempt += 1
            self.retries += 1


# --- talking to the server -------------------------------------------------------------------


class TritonConnection:
    """The few calls this CLI needs, the same over gRPC and HTTP."""

    def __init__(self, protocol: str, url: str, timeout: float, retry: RetryPolicy | None = None, client: Any = None) -> None:
        self.protocol = protocol
        self.url = url
        self.timeout = timeout
        self.retry = retry or RetryPolicy(deadline_s=0.0)
        self.module: Any
        self.client: Any
        if client is not None:  # tests: a fake client
            self.module = grpcclient if protocol == "grpc" else httpclient
            self.client = client
        elif protocol == "grpc":
            self.module = grpcclient
            self.client = grpcclient.InferenceServerClient(url)
        else:
            self.module = httpclient
            self.client = httpclient.InferenceServerClient(url.removeprefix("http://"), connection_timeout=timeout, network_timeout=timeout)

    def call_options(self) -> dict[str, Any]:
        # gRPC takes a deadline per call; the HTTP client's timeouts are set on the client.
        return {"client_timeout": self.timeout} if self.protocol == "grpc" else {}

    def request(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``self.client.<method>(*args, **kwargs)``, retried on UNAVAILABLE or a refused connection (``self.retry``)."""
        return self.retry.call(lambda: getattr(self.client, method)(*args, **kwargs))

    def close(self) -> None:
        self.client.close()

    def check_ready(self, model: str) -> None:
        where = f"Triton at {self.url} ({self.protocol})"
        try:
            server_ready = self.request("is_server_ready", **self.call_options())
        except Exception as error:  # connection refused, DNS, timeout: all mean "not reachable"
            raise ClassifyError(f"cannot reach {where}: {error_message(error)}") from None
        if not server_ready:
            raise ClassifyError(f"{where} is up but not ready (still loading models, or a model failed to load)")
        try:
            model_ready = self.request("is_model_ready", model, **self.call_options())
        except Exception as error:
            raise ClassifyError(f"cannot ask {where} about model '{model}': {error_message(error)}") from None
        if not model_ready:
            raise ClassifyError(f"model '{model}' is not ready on {where} (unknown name, or it failed to load)")

    def metadata_and_config(self, model: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """A model's metadata and config as JSON dicts, the same over gRPC and HTTP (every client reads tensors here)."""
        try:
            if self.protocol == "grpc":
                metadata = self.request("get_model_metadata", model, as_json=True, **self.call_options())
                config = self.request("get_model_config", model, as_json=True, **self.call_options())["config"]
            else:
                metadata = self.request("get_model_metadata", model)
                config = self.request("get_model_config", model)
        except Exception as error:
            raise ClassifyError(f"cannot read the metadata of model '{model}': {error_message(error)}") from None
        return metadata, config

    def model_interface(self, model: str) -> ModelInterface:
        metadata, config = self.metadata_and_config(model)
        return interface_from_metadata(model, metadata, int(config.get("max_batch_size", 0)))

    def infer(self, interface: ModelInterface, images: list[bytes], top_k: int | None) -> list[list[Prediction]]:
        """One request for all `images`; raises InferenceServerException (or OSError) on failure."""
        batched = interface.max_batch_size > 0
        payloads = np.array([[image] for image in images], dtype=np.object_)
        if not batched:
            payloads = payloads[0]  # a model without batching takes exactly one image, shape [1]
        image_input = self.module.InferInput(interface.image_input, list(payloads.shape), "BYTES")
        image_input.set_data_from_numpy(payloads)
        inputs = [image_input]
        if top_k is not None:
            ks = np.full(payloads.shape, top_k, dtype=np.int32)
            k_input = self.module.InferInput(interface.top_k_input, list(ks.shape), "INT32")
            k_input.set_data_from_numpy(ks)
            inputs.append(k_input)
        names = (interface.labels_output, interface.scores_output, interface.class_ids_output)
        outputs = [self.module.InferRequestedOutput(name) for name in names]
        result = self.request("infer", interface.name, inputs, outputs=outputs, **self.call_options())
        labels, scores, class_ids = (result.as_numpy(name).reshape(len(images), -1) for name in names)
        return [
            [
                Prediction(
                    label=label.decode("utf-8", errors="replace") if isinstance(label, bytes) else str(label),
                    score=float(score),
                    class_id=int(class_id),
                )
                for label, score, class_id in zip(row_labels, row_scores, row_ids)
            ]
            for row_labels, row_scores, row_ids in zip(labels, scores, class_ids)
        ]


def interface_from_metadata(model: str, metadata: dict[str, Any], max_batch_size: int) -> ModelInterface:
    """Pick tensors by datatype: BYTES input = image, INT32 input = top-k; BYTES/FP32/INT32 outputs."""

    def by_type(tensors: list[dict[str, Any]], datatype: str) -> list[str]:
        return [t["name"] for t in tensors if t.get("datatype") == datatype]

    inputs = metadata.get("inputs", [])
    outputs = metadata.get("outputs", [])
    expected = (
        "expected one BYTES input (encoded images), at most one INT32 input (top-k) and one BYTES, "
        "one FP32 and one INT32 output (labels, scores, class ids)"
    )
    described = (
        "inputs "
        + ", ".join(f"{t['name']} {t.get('datatype')}" for t in inputs)
        + "; outputs "
        + ", ".join(f"{t['name']} {t.get('datatype')}" for t in outputs)
    )
    image_inputs, k_inputs = by_type(inputs, "BYTES"), by_type(inputs, "INT32")
    other_inputs = [t["name"] for t in inputs if t.get("datatype") not in ("BYTES", "INT32")]
    labels, scores, class_ids = by_type(outputs, "BYTES"), by_type(outputs, "FP32"), by_type(outputs, "INT32")
    if len(image_inputs) != 1 or len(k_inputs) > 1 or other_inputs or not (len(labels) == len(scores) == len(class_ids) == 1):
        raise ClassifyError(f"model '{model}' does not look like an image classifier: {expected}; it has {described}")
    return ModelInterface(
        name=model,
        image_input=image_inputs[0],
        top_k_input=k_inputs[0] if k_inputs else None,
        labels_output=labels[0],
        scores_output=scores[0],
        class_ids_output=class_ids[0],
        max_batch_size=max_batch_size,
    )


# --- files ---------------------------------------------------------------------------------


def collect_files(paths: list[str], recursive: bool) -> tuple[list[str], list[str]]:
    """Files to classify, in order, and warnings about folders without images."""
    files: list[str] = []
    warnings: list[str] = []
    for argument in paths:
        path = Path(argument)
        if path.is_dir():
            candidates = path.rglob("*") if recursive else path.iterdir()
            found = sorted(p for p in candidates if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
            if not found:
                warnings.append(f"no {'/'.join(IMAGE_SUFFIXES)} files in folder {argument}")
            files.extend(str(p) for p in found)
        else:
            files.append(argument)  # a missing or unreadable file is reported as that file's error
    return files, warnings


def read_file(path: str) -> bytes | str:
    """The file's bytes, or an error message."""
    try:
        return Path(path).read_bytes()
    except OSError as error:
        return one_line(error.strerror or str(error))


# --- classification --------------------------------------------------------------------------


def classify(
    connection: TritonConnection, interface: ModelInterface, files: list[str], batch_size: int, top_k: int | None
) -> list[FileResult]:
    results = [FileResult(file=name) for name in files]
    pending: list[tuple[FileResult, bytes]] = []
    for result in results:
        data = read_file(result.file)
        if isinstance(data, str):
            result.error = data
        else:
            pending.append((result, data))

    for start in range(0, len(pending), batch_size):
        batch = pending[start : start + batch_size]
        try:
            predictions = connection.infer(interface, [data for _, data in batch], top_k)
        except (InferenceServerException, OSError) as error:
            if len(batch) == 1 or not is_invalid_arg(error):
                for result, _ in batch:
                    result.error = error_message(error)
                continue
            # Triton answers per request: one bad file fails its whole batch. Retry one by one to
            # find which file the server rejects.
            for result, data in batch:
                try:
                    result.predictions = connection.infer(interface, [data], top_k)[0]
                except (InferenceServerException, OSError) as single_error:
                    result.error = error_message(single_error)
            continue
        for (result, _), file_predictions in zip(batch, predictions):
            result.predictions = file_predictions
    return results


def format_table(result: FileResult) -> str:
    lines = [result.file]
    predictions = result.predictions or []
    width = max([len("label"), *(len(p.label) for p in predictions)])
    lines.append(f"  {'rank':>4}  {'label':<{width}}  {'score':>7}  {'class id':>8}")
    for rank, p in enumerate(predictions, start=1):
        lines.append(f"  {rank:>4}  {p.label:<{width}}  {p.score * 100:>6.2f}%  {p.class_id:>8}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="classify",
        description=__doc__.split("\n\n")[0],
        epilog="Exit codes: 0 all classified, 1 some file failed, 2 server/model problem.",
    )
    add_connection_arguments(parser, "image_classifier", "print one JSON document instead of tables")
    parser.add_argument("--top-k", type=positive_int, help="number of predictions per image (default: the model's)")
    parser.add_argument(
        "--batch-size", type=positive_int, default=8, help="images per request (default 8, at most the model's max_batch_size)"
    )
    return parser.parse_args(argv)


def add_connection_arguments(parser: argparse.ArgumentParser, default_model: str, json_help: str) -> None:
    """What every client takes: the files, the server, the model, output as JSON, timeouts and retries."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="image file or folder of images")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc", help="default: grpc")
    parser.add_argument("--url", help="server HOST:PORT (default: localhost:8001 for grpc, localhost:8000 for http)")
    parser.add_argument("--model", default=default_model, help=f"model name (default: {default_model})")
    parser.add_argument("--recursive", action="store_true", help="also look for images in subfolders")
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per server call (default 60)")
    parser.add_argument(
        "--deadline",
        type=float,
        default=DEFAULT_DEADLINE_S,
        help=f"seconds to keep retrying a call that fails with UNAVAILABLE or a refused connection (default {DEFAULT_DEADLINE_S:g}; 0: no retries)",
    )


def input_files(prog: str, args: argparse.Namespace, skip_suffixes: tuple[str, ...] = ()) -> list[str]:
    """The image files the arguments name (without the client's own outputs of an earlier run); warnings and
    the no-files error are printed here, and an empty list means exit 2."""
    files, warnings = collect_files(args.paths, args.recursive)
    files = [f for f in files if not f.endswith(skip_suffixes)] if skip_suffixes else files
    for warning in warnings:
        print(f"{prog}: warning: {warning}", file=sys.stderr)
    if not files:
        print(f"{prog}: error: no image files", file=sys.stderr)
    return files


def connect(args: argparse.Namespace) -> TritonConnection:
    """The connection the parsed arguments describe (protocol, URL, timeout, retry deadline)."""
    return TritonConnection(args.protocol, args.url or DEFAULT_URLS[args.protocol], args.timeout, RetryPolicy(args.deadline))


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    files = input_files("classify", args)
    if not files:
        return 2

    connection = connect(args)
    try:
        connection.check_ready(args.model)
        interface = connection.model_interface(args.model)
        if args.top_k is not None and interface.top_k_input is None:
            raise ClassifyError(f"model '{args.model}' has no INT32 top-k input; --top-k cannot be used with it")
        batch_size = args.batch_size
        if interface.max_batch_size == 0:
            batch_size = 1
        elif batch_size > interface.max_batch_size:
            print(
                f"classify: note: --batch-size {batch_size} is above the model's max_batch_size; using {interface.max_batch_size}",
                file=sys.stderr,
            )
            batch_size = interface.max_batch_size
        results = classify(connection, interface, files, batch_size, args.top_k)
    except ClassifyError as error:
        print(f"classify: error: {error}", file=sys.stderr)
        return 2
    finally:
        connection.close()

    return print_results("classify", results, format_table, args.json)


def print_results(prog: str, results: Sequence[Any], table: Callable[[Any], str], as_json: bool) -> int:
    """One JSON document, or a table per file; each file's error on stderr. Exit code 1 if a file failed."""
    if as_json:
        print(json.dumps([result.to_json() for result in results], indent=2))
    tables = []
    for result in results:
        if result.error is not None:
            print(f"{prog}: error: {result.file}: {result.error}", file=sys.stderr)
        elif not as_json:
            tables.append(table(result))
    if tables:
        print("\n\n".join(tables))
    return 1 if any(result.error is not None for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
