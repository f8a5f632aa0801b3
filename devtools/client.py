"""Send image files to a pipeline's ensemble on a running Triton server and show the task's answers.

    ./scripts/classify | segment | detect | read-text PATH [PATH ...] [--protocol grpc|http] [--url HOST:PORT]
                       [--model NAME] [--batch-size N] [--recursive] [--json]
                       [--timeout SECONDS] [--deadline SECONDS] [the task's own options]
    python -m devtools.client --task NAME PATH [PATH ...] [the same options]

PATH is an image file or a folder (its *.jpg, *.jpeg, *.png and *.webp files, sorted;
--recursive descends into subfolders). Files are sent as encoded bytes, several per request
(--batch-size). Nothing is hard-coded about the model: the client reads its config from the
server, finds the postprocess step's ``task`` parameter, and reads the tensors by role
(:mod:`vision_serving.tasks`). The task's client (:mod:`devtools.clients`: ``devtools/clients/<task>.py``,
or the generic one that prints every output) says how an answer is printed and which options it
takes (classification: --top-k; segmentation: --out-dir, --overlay; detection: --score-threshold,
--iou-threshold, --draw; text_reading: --draw). Each script names its task (``script_main``); the
program's name is its client's ``script``, and --model defaults to the task's shipped pipeline (its client's
``pipeline``) where model_repository/ has it, else to the task's only pipeline there; with several and none of them
the shipped one, --model is required and its error names them (:func:`default_model`).

Server calls that fail with UNAVAILABLE (gRPC UNAVAILABLE, HTTP 503: a full model
queue, a server shutting down, or over gRPC a refused connection) or whose
connection is refused are retried with jittered exponential backoff until
--deadline seconds have passed since the call's first attempt (0: no retries);
nothing else is retried (see RetryPolicy).

Exit codes: 0 all files answered, 1 some file failed (each error is reported
for its own file), 2 the server is not reachable or ready, or the model is not a
pipeline of the script's task.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import json_format
from tritonclient.utils import InferenceServerException

from devtools import clients
from devtools.clients.base import TaskClient, positive_int
from vision_serving import layout, model_config
from vision_serving.protos.model_config_pb2 import ModelConfig
from vision_serving.tasks import registry
from vision_serving.tasks.base import Role, Task, resolve_roles

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".heic", ".heif", ".avif")
DEFAULT_URLS = {"grpc": "localhost:8001", "http": "localhost:8000"}
# How each protocol reports Triton's INVALID_ARG: the server rejected this input.
INVALID_ARG_STATUSES = {"StatusCode.INVALID_ARGUMENT", "400"}

DEFAULT_BATCH_SIZE = 8


# The program name of `python -m devtools.client --task NAME` (a script's is its client's `script`).
GENERIC_PROG = "python -m devtools.client"


def task_pipelines(task_name: str, repository: Path = layout.MODEL_REPOSITORY) -> list[str]:
    """The pipelines of ``repository`` whose postprocess config's ``task`` parameter is ``task_name``, by name
    (a pipeline whose config cannot be read is left out: the consistency check reports it)."""
    try:
        pipelines = layout.pipelines(repository)
    except layout.LayoutError:
        return []
    found = []
    for pipeline in pipelines:
        try:
            config = model_config.load_config(pipeline.model_dir("postprocess"))
        except (model_config.ConfigError, OSError):
            continue
        if model_config.parameter(config, "task", "") == task_name:
            found.append(pipeline.name)
    return found


def default_model(task_name: str, repository: Path = layout.MODEL_REPOSITORY) -> str | None:
    """The pipeline a client of ``task_name`` calls without --model: its client's shipped ``pipeline`` where the
    repository has it, else the task's only pipeline there (None: none, or several: --model is required). A pipeline
    a user adds never takes the place of the shipped one."""
    found = task_pipelines(task_name, repository)
    preferred = clients.client_for(task_name).pipeline
    if preferred in found:
        return preferred
    return found[0] if len(found) == 1 else None


def model_choices(task_name: str, repository: Path = layout.MODEL_REPOSITORY) -> str:
    """What --model may name when a client has no default: the task's pipelines in the repository, or that it has none."""
    found = task_pipelines(task_name, repository)
    return f"one of {', '.join(found)}" if found else f"no pipeline of {repository.name}/ has the task {task_name}"


def client_command(task_name: str, model: str, samples: Path, url: str | None = None) -> str:
    """The command line that sends ``samples`` (or its client's ``sample`` file of it) to ``model`` at ``url`` (None:
    the default): ``./scripts/<script>`` of the task's client, else ``.venv/bin/python -m devtools.client --task``;
    --model unless ``model`` is the task's :func:`default_model`."""
    client = clients.client_for(task_name)
    head = [f"./scripts/{client.script}"] if client.script else [".venv/bin/python", "-m", "devtools.client", "--task", task_name]
    options = [*(["--url", url] if url else []), *(["--model", model] if model != default_model(task_name) else [])]
    return " ".join([*head, *options, str(samples / client.sample if client.sample else samples)])


class ClientError(RuntimeError):
    """The run cannot go on (server unreachable or not ready, unexpected model): exit 2."""


@dataclass(frozen=True)
class PipelineInterface:
    """A pipeline's ensemble as the client sees it: its task, its tensors by role."""

    name: str
    task: Task
    image_input: str
    request_inputs: dict[str, str | None]  # role -> the ensemble's optional input (None: it has none)
    outputs: dict[str, str | None]  # role -> the ensemble's output
    max_batch_size: int
    task_parameters: dict[str, str] = field(default_factory=dict)  # the parameters of its step with the task parameter


@dataclass
class FileResult:
    file: str
    data: bytes = b""
    lines: list[str] = field(default_factory=list)
    record: dict[str, Any] | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"file": self.file, "error": self.error}
        return self.record or {"file": self.file}


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
            raise ClientError(f"cannot reach {where}: {error_message(error)}") from None
        if not server_ready:
            raise ClientError(f"{where} is up but not ready (still loading models, or a model failed to load)")
        try:
            model_ready = self.request("is_model_ready", model, **self.call_options())
        except Exception as error:
            raise ClientError(f"cannot ask {where} about model '{model}': {error_message(error)}") from None
        if not model_ready:
            raise ClientError(f"model '{model}' is not ready on {where} (unknown name, or it failed to load)")

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
            raise ClientError(f"cannot read the metadata of model '{model}': {error_message(error)}") from None
        return metadata, config

    def config(self, model: str) -> ModelConfig:
        """A model's config from the server, parsed with Triton's schema."""
        _, raw = self.metadata_and_config(model)
        config = ModelConfig()
        json_format.ParseDict(raw, config, ignore_unknown_fields=True)
        return config

    def pipeline_interface(self, model: str, expected: Task | None = None) -> PipelineInterface:
        """The ensemble's task (the ``task`` parameter of its postprocess step) and its tensors by role."""
        ensemble = self.config(model)
        parameters: dict[str, str] = {}
        for step in reversed(ensemble.ensemble_scheduling.step):
            step_config = self.config(step.model_name)
            if "task" in step_config.parameters:
                parameters = {key: value.string_value for key, value in step_config.parameters.items()}
                break
        task_name = parameters.get("task")
        if task_name is None:
            raise ClientError(f"model '{model}' is not a pipeline of this bundle: no step of it has a task parameter")
        try:
            task = registry.task(task_name)
        except model_config.ConfigError as error:
            raise ClientError(f"model '{model}': {error}") from None
        if expected is not None and task is not expected:
            raise ClientError(f"model '{model}' is a {task.name} pipeline, not {expected.name}: use its own client")
        try:
            inputs = resolve_roles(ensemble, "input", (Role("image", "BYTES", (1,)), *task.request_roles()))
            outputs = resolve_roles(ensemble, "output", task.output_roles())
        except model_config.ConfigError as error:
            raise ClientError(str(error)) from None
        image = inputs.pop("image")
        assert image is not None
        return PipelineInterface(model, task, image, inputs, outputs, int(ensemble.max_batch_size), parameters)

    def infer(self, interface: PipelineInterface, images: list[bytes], options: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
        """One request for all ``images`` (with the task's optional inputs by role) -> each image's outputs by
        role, without the batch dim; raises InferenceServerException (or OSError) on failure."""
        batched = interface.max_batch_size > 0
        payloads = np.array([[image] for image in images], dtype=np.object_)
        if not batched:
            payloads = payloads[0]  # a model without batching takes exactly one image, shape [1]
        image_input = self.module.InferInput(interface.image_input, list(payloads.shape), "BYTES")
        image_input.set_data_from_numpy(payloads)
        inputs = [image_input]
        for role, value in options.items():
            name = interface.request_inputs.get(role)
            if name is None:
                raise ClientError(f"model '{interface.name}' has no {role} input; its option cannot be used with it")
            value = value if batched else value[0]
            tensor = self.module.InferInput(name, list(value.shape), model_config.dtype_name(_DATATYPES[value.dtype.type]))
            tensor.set_data_from_numpy(value)
            inputs.append(tensor)
        names = {role: name for role, name in interface.outputs.items() if name is not None}
        outputs = [self.module.InferRequestedOutput(name) for name in names.values()]
        result = self.request("infer", interface.name, inputs, outputs=outputs, **self.call_options())
        arrays = {role: result.as_numpy(name) for role, name in names.items()}
        if not batched:
            arrays = {role: value[None] for role, value in arrays.items()}
        return [{role: value[index] for role, value in arrays.items()} for index in range(len(images))]


_DATATYPES = {
    np.int32: model_config.model_config_pb2.TYPE_INT32,
    np.float32: model_config.model_config_pb2.TYPE_FP32,
    np.bool_: model_config.model_config_pb2.TYPE_BOOL,
    np.object_: model_config.model_config_pb2.TYPE_STRING,  # BYTES: a tiled pipeline's TILING
}


# --- files ---------------------------------------------------------------------------------


def collect_files(paths: list[str], recursive: bool) -> tuple[list[str], list[str]]:
    """Files to send, in order, and warnings about folders without images."""
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


# --- answers ---------------------------------------------------------------------------------


def answer_files(
    connection: TritonConnection,
    interface: PipelineInterface,
    files: list[str],
    batch_size: int,
    args: argparse.Namespace,
    client: TaskClient | None = None,
) -> list[FileResult]:
    """Every file's answer (or error), batch by batch, reported by ``client`` (default: the task's); a batch the
    server refuses as INVALID_ARG is retried one file at a time, so one bad file fails only itself."""
    results = [FileResult(file=name) for name in files]
    pending: list[FileResult] = []
    for result in results:
        data = read_file(result.file)
        if isinstance(data, str):
            result.error = data
        else:
            result.data = data
            pending.append(result)
    shown_by = client or clients.client_for(interface.task.name)

    def answer(batch: list[FileResult]) -> None:
        for result, outputs in zip(batch, connection.infer(interface, [r.data for r in batch], shown_by.request_inputs(args, len(batch)))):
            try:
                report = shown_by.report(result.file, outputs, result.data, args)
            except (ValueError, OSError) as error:
                result.error = one_line(str(error))
                continue
            result.lines, result.record = report.lines, report.record

    for start in range(0, len(pending), batch_size):
        batch = pending[start : start + batch_size]
        try:
            answer(batch)
        except (InferenceServerException, OSError) as error:
            if len(batch) == 1 or not is_invalid_arg(error):
                for result in batch:
                    result.error = error_message(error)
                continue
            for result in batch:  # find which file the server rejects
                try:
                    answer([result])
                except (InferenceServerException, OSError) as single_error:
                    result.error = error_message(single_error)
    return results


def add_connection_arguments(parser: argparse.ArgumentParser, default_model: str | None, json_help: str, task_name: str = "") -> None:
    """What every client takes: the files, the server, the model (required when there is no ``default_model``: its help
    names ``task_name``'s pipelines), output as JSON, timeouts and retries."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="image file or folder of images")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc", help="default: grpc")
    parser.add_argument("--url", help="server HOST:PORT (default: localhost:8001 for grpc, localhost:8000 for http)")
    if default_model is None:  # required: parse_args names the choices when it is missing
        parser.add_argument("--model", help=f"model name (required: {model_choices(task_name)})")
    else:
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


def parse_args(
    prog: str, task: Task, default_model: str | None, argv: list[str] | None, client: TaskClient | None = None, task_option: bool = False
) -> argparse.Namespace:
    """The options of ``task``'s client (default: its module's, :func:`devtools.clients.client_for`); ``task_option``:
    the parser of ``python -m devtools.client``, which takes ``--task`` too."""
    client = client or clients.client_for(task.name)
    parser = argparse.ArgumentParser(
        prog=prog,
        description=f"Send images to a {task.name} pipeline on a running Triton server and print its answers.",
        epilog="Exit codes: 0 all answered, 1 some file failed, 2 server/model problem.",
    )
    if task_option:
        parser.add_argument("--task", required=True, choices=sorted(registry.TASKS), help="the pipeline's task")
    add_connection_arguments(parser, default_model, "print one JSON document instead of tables", task.name)
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        help=f"images per request (default {task.client_batch_size or DEFAULT_BATCH_SIZE}, at most the model's max_batch_size)",
    )
    client.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.model is None:
        parser.error(f"--model is required: {model_choices(task.name)}")
    return args


def run(task_name: str, prog: str, argv: list[str] | None = None, task_option: bool = False) -> int:
    """A client for one task's pipelines: its options parsed, its files answered and printed; the exit code."""
    task = registry.task(task_name)
    client = clients.client_for(task_name)
    args = parse_args(prog, task, default_model(task_name), argv, client, task_option)
    files = input_files(prog, args, client.output_suffixes())  # not our own outputs of an earlier run
    if not files:
        return 2
    args.single_image = len(files) == 1
    connection = connect(args)
    try:
        connection.check_ready(args.model)
        interface = connection.pipeline_interface(args.model, task)
        args.task_parameters = interface.task_parameters  # what a client may read of the pipeline (TaskClient.report)
        for role in client.request_inputs(args, 1):
            if interface.request_inputs.get(role) is None:
                raise ClientError(f"model '{args.model}' has no {role} input; its option cannot be used with it")
        batch_size = args.batch_size or min(task.client_batch_size or DEFAULT_BATCH_SIZE, max(interface.max_batch_size, 1))
        if interface.max_batch_size == 0:
            batch_size = 1
        elif batch_size > interface.max_batch_size:
            print(
                f"{prog}: note: --batch-size {batch_size} is above the model's max_batch_size; using {interface.max_batch_size}",
                file=sys.stderr,
            )
            batch_size = interface.max_batch_size
        results = answer_files(connection, interface, files, batch_size, args, client)
    except ClientError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    finally:
        connection.close()
    return print_results(prog, results, lambda result: "\n".join(result.lines), args.json)


def script_main(task_name: str, argv: list[str] | None = None) -> int:
    """``./scripts/<script>``: the client of the task ``task_name``, named as its client's ``script`` (a task without
    a client of its own: as the script that runs, ``scripts/<name>.py``)."""
    return run(task_name, clients.client_for(task_name).script or Path(sys.argv[0]).stem.replace("_", "-"), argv)


def main(argv: list[str] | None = None) -> int:
    """``python -m devtools.client --task NAME ...``: the client of any task (its own, or the generic one)."""
    chooser = argparse.ArgumentParser(prog=GENERIC_PROG, add_help=False)
    chooser.add_argument("--task", choices=sorted(registry.TASKS))
    chosen, _ = chooser.parse_known_args(argv)
    if chosen.task is None:  # --help, or --task is missing: say what it takes
        parser = argparse.ArgumentParser(prog=GENERIC_PROG, description="Send images to a pipeline of any task and print its answers.")
        parser.add_argument("--task", required=True, choices=sorted(registry.TASKS), help="the pipeline's task")
        parser.add_argument("rest", nargs="*", metavar="...", help="the files and options of its client (--task NAME --help)")
        parser.parse_args(argv)  # exits: the help, or the missing --task
        return 2
    return run(chosen.task, GENERIC_PROG, argv, task_option=True)


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
