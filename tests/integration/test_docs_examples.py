"""The documented examples, run against the run's shared tritonserver: every console example whose program is a client
(README.md, docs/*.md: ``tests.support.docs.example_tier`` says "integration", except new-pipeline's, which
tests/integration/test_bring_your_own_model.py runs), every Python example that says what it prints, and the upload
refusals of docs/pipelines.md's error table, each compared with what the doc shows."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tests.support import docs

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PROGRAMS = re.compile(r"(?<![\w/.])(\./)?scripts/(classify|segment|detect|read-text|curl_infer\.sh)\b")

pytestmark = pytest.mark.integration

# Client examples of a pipeline the shared server does not serve: the tiling page's runs against the tiling
# benchmark's own tiled pipeline and drawn 12 MP photo (python -m benchmarks.tiling), not run here.
OTHER_SERVER = {"docs/tiling.md": "--model bench_tiled"}


def documented_blocks() -> list[docs.Block]:
    return [block for path in DOCUMENTS for block in docs.blocks(path.read_text(), path.relative_to(ROOT).as_posix())]


def client_examples() -> list[docs.Block]:
    """The console blocks whose commands are the clients' (each block's commands run in order, in one folder)."""
    found = []
    for block in documented_blocks():
        shown = docs.shown_commands(block)
        clients = all(docs.example_tier(each.command) == "integration" and "new-pipeline" not in each.command for each in shown)
        if shown and clients and not any(OTHER_SERVER.get(block.doc, "\0") in each.command for each in shown):
            found.append(block)
    return found


@pytest.fixture()
def samples(tmp_path: Path, photo_bytes: dict[str, bytes]) -> Path:
    """A folder holding ``.build/samples/`` as ./scripts/serve writes it: the package photos by name."""
    folder = tmp_path / ".build" / "samples"
    folder.mkdir(parents=True)
    for name, data in photo_bytes.items():
        suffix = ".jpg" if data[:2] == b"\xff\xd8" else ".png"
        (folder / f"{name}{suffix}").write_bytes(data)
    return tmp_path


def at_server(command: str, server) -> str:
    """A documented command line aimed at the test's server: the repository's scripts by their path, the clients
    given ``--url``, curl_infer.sh's ``localhost:8000`` the server's HTTP address."""

    def program(match: re.Match[str]) -> str:
        name = match.group(2)
        if name == "curl_infer.sh":
            return str(ROOT / "scripts" / name)
        url = server.http_url if "--protocol http" in command else server.grpc_url
        return f"{ROOT / 'scripts' / name} --url {url}"

    return PROGRAMS.sub(program, command).replace("localhost:8000", server.http_url)


@pytest.mark.parametrize("block", client_examples(), ids=lambda block: block.where)
def test_a_client_example_prints_what_the_doc_shows(block: docs.Block, triton_server, samples: Path):
    for shown in docs.shown_commands(block):
        run = subprocess.run(
            ["bash", "-c", at_server(shown.command, triton_server)],
            cwd=samples,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # in the order a terminal shows them
            text=True,
            timeout=300,
        )
        printed = run.stdout.strip()
        assert docs.same_output(shown.output, printed), (
            f"{block.where}: $ {shown.command}\nthe doc shows\n{shown.output}\nit prints\n{printed}"
        )


PYTHON_EXAMPLES = docs.printed_blocks(documented_blocks())


@pytest.mark.parametrize(("code", "printed"), PYTHON_EXAMPLES, ids=[code.where for code, _ in PYTHON_EXAMPLES])
def test_a_python_example_prints_what_the_doc_shows(code: docs.Block, printed: docs.Block, triton_server, samples: Path):
    program = code.text.replace("localhost:8001", triton_server.grpc_url)
    run = subprocess.run([sys.executable, "-c", program], cwd=samples, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert docs.same_output(printed.text, run.stdout), f"{code.where}: the doc shows\n{printed.text}\nit prints\n{run.stdout}"


def upload(photo_bytes: dict[str, bytes], described: str) -> bytes:
    """The upload each of docs/pipelines.md's upload examples describes, built as tests/unit/test_docs.py builds it."""
    if described.startswith("truncated PNG: chunk iCCP"):
        return photo_bytes["astronaut"][:2000]
    if described.startswith("PNG declares 60000x60000"):
        brick = photo_bytes["brick"]
        return brick[:16] + (60000).to_bytes(4, "big") * 2 + brick[24:]
    if described.startswith("unrecognized image format: looks like GIF"):
        from PIL import Image

        buffer = io.BytesIO()
        Image.open(io.BytesIO(photo_bytes["coffee"])).convert("P").save(buffer, "GIF")
        return buffer.getvalue()
    raise AssertionError(f"no upload for {described!r}: add it here")


def upload_examples() -> list[tuple[str, str]]:
    """(pipeline, message) of each upload example of docs/pipelines.md's error table."""
    found = []
    for block in docs.blocks((ROOT / "docs/pipelines.md").read_text(), "docs/pipelines.md"):
        for span in docs.inline_code(block.text) if block.kind == "row" else []:
            named = re.match(r"in ensemble '(\w+)', (.*(?:PNG|GIF).*)$", span)
            if named:
                found.append((named.group(1), named.group(2)))
    return found


@pytest.mark.parametrize(("pipeline", "message"), upload_examples())
def test_an_upload_example_gets_its_message(pipeline: str, message: str, triton_server, photo_bytes: dict[str, bytes]):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[upload(photo_bytes, message)]], dtype=np.object_))
    with pytest.raises(InferenceServerException) as raised:
        client.infer(pipeline, [image])
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT", raised.value
    assert f"in ensemble '{pipeline}', {message}" in raised.value.message(), raised.value.message()


def test_the_examples_are_found():
    """A parser that stops finding the examples would let every test above pass on nothing."""
    assert len(client_examples()) >= 3 and len(PYTHON_EXAMPLES) >= 2 and len(upload_examples()) >= 3
