"""The images' locks (the serving image's, the image gateway's) install from wheels alone on the image's Python 3.12 (manylinux x86_64),
from PyPI alone: `pip download --only-binary=:all: --require-hashes` of requirements/image.txt and requirements/gateway.txt.

pip runs --isolated with PIP_* unset and --index-url https://pypi.org/simple, so this machine's extra
indexes and wheel directory (pip.conf, PIP_FIND_LINKS) cannot make it pass where PyPI would fail.
The wheels are kept in .build/dependency-check/image so a rerun only checks them (pip re-verifies the
hash of every kept file); needs network access to PyPI, like the first bootstrap: marked ``network``
(``./scripts/test -m "not network"`` leaves it out).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from devtools import lock
from vision_serving import layout

DOWNLOADS = layout.BUILD_DIR / "dependency-check"

pytestmark = pytest.mark.network


def manylinux_platforms(glibc_minor: int) -> list[str]:
    """pip's --platform tags a manylinux_2_<glibc_minor> x86_64 system accepts (pip does not expand one tag to the older ones)."""
    tags = [f"manylinux_2_{minor}_x86_64" for minor in range(glibc_minor, 4, -1)]
    return [*tags, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]


@pytest.mark.parametrize("name", ["image", "gateway"])
def test_an_image_lock_downloads_as_cp312_manylinux_wheels_from_pypi(name):
    """The serving image's lock, and the image gateway's (docker/gateway.Dockerfile)."""
    image = lock.BY_NAME[name]
    assert image.python_version == "3.12" and image.platform == "x86_64-manylinux_2_28"
    target = DOWNLOADS / name
    target.mkdir(parents=True, exist_ok=True)
    platforms = [argument for tag in manylinux_platforms(28) for argument in ("--platform", tag)]
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--isolated",
            "--disable-pip-version-check",
            "--no-input",
            # A slow or flaky link to PyPI retried, not a failed check (--isolated drops the machine's pip.conf timeout).
            "--timeout",
            "120",
            "--retries",
            "10",
            "--index-url",
            "https://pypi.org/simple",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--implementation",
            "cp",
            *platforms,
            "--require-hashes",
            "--no-deps",
            "-r",
            str(image.lock),
            "-d",
            str(target),
        ],
        capture_output=True,
        text=True,
        env={**environment, "PIP_CONFIG_FILE": os.devnull},
        timeout=1200,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-3000:]
    wheels = {path.name.split("-")[0].lower().replace("_", "-") for path in target.glob("*.whl")}
    assert set(lock.read_lock(image.lock)) <= {lock.normalize(name) for name in wheels}
    assert not [path.name for path in target.iterdir() if not path.name.endswith(".whl")]
