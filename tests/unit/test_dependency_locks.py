"""requirements/: every lock is generated from its current input, fully pinned and hashed; the serving
image's set is exactly what vision_serving imports; the installers use the locks with --require-hashes."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from devtools import lock
from vision_serving import layout

ROOT = layout.REPOSITORY_ROOT
SET_NAMES = [lock_set.name for lock_set in lock.SETS]
# Import name -> distribution, where they differ.
# nvidia: the namespace package whose only import in vision_serving is DALI (nvidia.dali, the GPU pixel path).
DISTRIBUTION = {
    "cv2": "opencv-python-headless",
    "google": "protobuf",
    "PIL": "pillow",
    "_pi_heif": "pi-heif",
    "nvidia": "nvidia-dali-cuda130",
}
# Third-party modules vision_serving imports that the serving image need not have, and why.
NOT_SERVED = {
    "onnx": "vision_serving.consistency.check_onnx (offline checks by the builders and tests), imported inside the function",
    "triton_python_backend_utils": "provided by the Python backend itself",
}


@pytest.mark.parametrize("name", SET_NAMES)
def test_every_lock_is_generated_from_its_current_input(name):
    assert lock.stale(lock.BY_NAME[name]) is None, "run python -m devtools.lock " + name


@pytest.mark.parametrize("name", SET_NAMES)
def test_every_lock_pins_its_inputs_and_hashes_every_package(name):
    lock_set = lock.BY_NAME[name]
    pinned = lock.read_lock(lock_set.lock)
    assert pinned, lock_set.lock
    for package, version in lock.input_pins(lock_set.input).items():
        if lock_set.drop and re.fullmatch(lock_set.drop, package):
            assert package not in pinned
            continue
        assert package in pinned, f"{package} of {lock_set.input.name} missing from {lock_set.lock.name}"
        assert pinned[package].version.split("+")[0] == version, (package, pinned[package].version, version)
    unhashed = [pin.name for pin in pinned.values() if not pin.hashes]
    assert not unhashed, f"{lock_set.lock.name}: no --hash for {unhashed}"
    # Every requirement line of the lock is one read_lock saw (nothing unpinned slips through).
    lines = [line for line in lock_set.lock.read_text().splitlines() if line and not line.startswith((" ", "#"))]
    assert len(lines) == len(pinned)


def test_only_the_locks_and_their_inputs_are_in_requirements():
    files = {path.name for path in layout.REQUIREMENTS_DIR.iterdir() if not path.name.startswith(".")}
    assert files == {f"{name}.{suffix}" for name in SET_NAMES for suffix in ("in", "txt")}


def test_the_serving_image_set_has_no_client_library_and_no_build_tools():
    pinned = lock.read_lock(lock.BY_NAME["image"].lock)
    client = {"tritonclient", "grpcio", "geventhttpclient", "gevent", "python-rapidjson", "urllib3"}
    assert not (client | {"torch", "onnx", "tensorrt"}) & set(pinned)
    # Configs are parsed with the vendored schema (vision_serving/protos), which needs protobuf alone.
    assert "protobuf" in pinned
    assert "from .protos import model_config_pb2" in (ROOT / "vision_serving" / "model_config.py").read_text()


def third_party_imports(package: Path) -> dict[str, set[str]]:
    """Top-level module -> files importing it (at any depth), for modules that are neither stdlib nor this repository's."""
    local = {"vision_serving", "builders", "devtools"}
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in local and top != "__future__":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_the_serving_image_set_covers_every_import_of_vision_serving():
    pinned = lock.read_lock(lock.BY_NAME["image"].lock)
    imported = third_party_imports(ROOT / "vision_serving")
    assert "numpy" in imported and "cv2" in imported
    missing = {
        module: sorted(files)
        for module, files in imported.items()
        if module not in NOT_SERVED and lock.normalize(DISTRIBUTION.get(module, module)) not in pinned
    }
    assert not missing, f"imported by vision_serving but not in requirements/image.in: {missing}"


def nvidia_packages(pinned: dict[str, lock.Pin]) -> set[str]:
    """PyPI's CUDA torch brings nvidia-cublas, nvidia-cuda-runtime, nvidia-nccl-cu13, ..."""
    return {name for name in pinned if name.startswith("nvidia-")}


def test_the_builder_set_leaves_out_torch_and_its_cuda_packages():
    pinned = lock.read_lock(lock.BY_NAME["builder"].lock)
    assert not {"torch", "triton", "cuda-toolkit"} & set(pinned)
    assert {"cuda-python", "cuda-bindings"} <= set(pinned)  # the GPU tests' numeric checks (pure bindings: libcuda at run time)
    assert nvidia_packages(pinned) == {"nvidia-ml-py"}  # modelopt's
    assert {"sympy", "networkx", "jinja2", "fsspec", "filelock"} <= set(pinned)  # the CPU torch's dependencies stay
    dockerfile = (ROOT / "docker" / "builder.Dockerfile").read_text()
    assert '--index-url "${TORCH_INDEX_URL}" "$(grep -E \'^torch==\' requirements/builder.in)"' in dockerfile
    assert (
        lock.input_pins(lock.BY_NAME["builder"].input)["torch"] == lock.read_lock(lock.BY_NAME["dev"].lock)["torch"].version.split("+")[0]
    )


def test_the_dev_set_takes_the_cpu_torch():
    pinned = lock.read_lock(lock.BY_NAME["dev"].lock)
    assert pinned["torch"].version.endswith("+cpu") and len(pinned["torch"].hashes) == 1
    # DALI and the codecs it loads (image.in: the GPU pixel path; its CPU operators run the parity tests here): no CUDA runtime.
    dali = {
        "nvidia-dali-cuda130",
        "nvidia-nvimgcodec-cu13",
        "nvidia-nvjpeg",
        "nvidia-nvjpeg2k-cu13",
        "nvidia-nvtiff-cu13",
        "nvidia-libnvcomp-cu13",
    }
    assert nvidia_packages(pinned) == {"nvidia-ml-py", "nvidia-pytriton", *dali}


def test_modelopt_is_pinned_once():
    versions = dict(line.split("=", 1) for line in (ROOT / "versions.env").read_text().splitlines() if re.match(r"^[A-Z_]+=", line))
    assert lock.read_lock(lock.BY_NAME["modelopt"].lock)["nvidia-modelopt"].version == versions["MODELOPT_VERSION"]
    assert versions["SERVE_REQUIREMENTS"] == "requirements/image.txt"


@pytest.mark.parametrize(
    ("path", "needles"),
    [
        (
            "scripts/bootstrap.sh",
            ['--require-hashes -r "$ROOT/requirements/dev.txt"', '--require-hashes -r "$ROOT/requirements/modelopt.txt"'],
        ),
        ("docker/server.Dockerfile", ["--require-hashes --only-binary=:all: -r requirements/image.txt"]),
        ("docker/builder.Dockerfile", ["--require-hashes -r requirements/builder.txt", "--require-hashes -r requirements/modelopt.txt"]),
        ("builders/build_envs.py", ['"--require-hashes"', 'PIP_LOCK = REQUIREMENTS_DIR / "pip.txt"']),
    ],
)
def test_every_installer_uses_a_lock_with_hashes(path, needles):
    text = (ROOT / path).read_text()
    for needle in needles:
        assert needle in text, (path, needle)


def test_the_check_flag_reports_a_stale_lock(tmp_path, monkeypatch, capsys):
    stale_set = lock.LockSet("x", "test", "3.12", lock.IMAGE_PLATFORM)
    monkeypatch.setattr(lock, "REQUIREMENTS_DIR", tmp_path)
    monkeypatch.setattr(lock, "BY_NAME", {"x": stale_set})
    (tmp_path / "x.in").write_text("numpy==1.26.4\n")
    (tmp_path / "x.txt").write_text(f"{lock.HEADER_HASH}{lock.inputs_sha256(stale_set)}\nnumpy==1.26.4 \\\n    --hash=sha256:{'0' * 64}\n")
    assert lock.main(["--check", "x"]) == 0
    (tmp_path / "x.in").write_text("numpy==1.26.4\nscipy==1.17.1\n")
    assert lock.main(["--check", "x"]) == 1
    assert "x.txt is older than x.in" in capsys.readouterr().err


def test_an_unknown_set_is_a_user_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        lock.main(["nosuchset"])
    assert exit_info.value.code == 2 and "unknown set 'nosuchset'" in capsys.readouterr().err


def test_the_gateway_set_pins_the_serving_library_as_the_image_does_and_covers_its_imports():
    """The gateway image (requirements/gateway.in) carries vision_serving's packages at the serving image's versions, no
    core runtime, and every third-party module gateway/ imports."""
    gateway, image = lock.read_lock(lock.BY_NAME["gateway"].lock), lock.read_lock(lock.BY_NAME["image"].lock)
    shared = set(gateway) & set(image)
    assert {"numpy", "opencv-python-headless", "protobuf", "simplejpeg", "pi-heif"} <= shared
    assert {name: (gateway[name].version, image[name].version) for name in shared if gateway[name].version != image[name].version} == {}
    assert not {"onnxruntime", "openvino", "scipy", "torch", "tensorrt"} & set(gateway)
    distributions = {**DISTRIBUTION, "prometheus_client": "prometheus-client"}
    imported = third_party_imports(ROOT / "gateway")
    assert {"starlette", "tritonclient", "aiohttp", "numpy"} <= set(imported)
    missing = {
        module: sorted(files) for module, files in imported.items() if lock.normalize(distributions.get(module, module)) not in gateway
    }
    assert not missing, f"imported by gateway/ but not in requirements/gateway.in: {missing}"
