"""A user's own pipeline beside the shipped ones never makes the project's tests fail (docs/models.md: the user adds a
folder to model_repository/ and runs ``./scripts/test``).

The unit test modules that read the model repository (they name ``MODEL_REPOSITORY`` or the shipped pipelines) run in a
subprocess with a pytest plugin written here: it points ``vision_serving.layout.MODEL_REPOSITORY`` at a temporary
repository holding the project's pipelines as committed and a user's pipeline made as docs/models.md makes one
(``new-pipeline my_own_classifier --from image_classifier``). They pass as they do without it: the tests about the
shipped pipelines take them from one list (tests/support/shipped.py), and the user's folder is the consistency check's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import shipped

UNIT = Path(__file__).resolve().parent
ROOT = UNIT.parent.parent
NAME = "my_own_classifier"

PLUGIN = f'''
"""The project's model repository with a user's pipeline beside the shipped ones."""

import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support import shipped

from vision_serving import layout

_repository = Path(tempfile.mkdtemp(prefix="user-repository-")) / "model_repository"
_tracked = subprocess.run(["git", "ls-files", "model_repository"], capture_output=True, text=True, check=True, cwd=layout.REPOSITORY_ROOT)
for _relative in _tracked.stdout.split():  # the repository as committed (its built files are no unit test's)
    (_repository.parent / _relative).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(layout.REPOSITORY_ROOT / _relative, _repository.parent / _relative)
layout.MODEL_REPOSITORY = _repository

from builders import scaffold  # noqa: E402 (after the repository moved: defaults bind to it)

scaffold.new_pipeline("{NAME}", "image_classifier", repository=_repository, log=lambda _: None)
'''


def repository_readers() -> list[Path]:
    """The unit test modules that read the model repository (this one aside)."""
    return [
        path
        for path in sorted(UNIT.rglob("test_*.py"))
        if path != Path(__file__).resolve() and any(word in path.read_text() for word in ("MODEL_REPOSITORY", "shipped"))
    ]


def test_a_users_pipeline_beside_the_shipped_ones_breaks_no_test(tmp_path):
    (tmp_path / "user_pipeline.py").write_text(PLUGIN)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    check = (
        f"import user_pipeline\nfrom vision_serving import layout\nassert (layout.MODEL_REPOSITORY / '{NAME}' / 'pipeline.toml').is_file()"
    )
    made = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=ROOT, env=environment, timeout=120)
    assert made.returncode == 0, made.stderr[-3000:]
    readers = repository_readers()
    assert {path.relative_to(UNIT).as_posix() for path in readers} >= {"gateway/test_catalog.py", "benchmarks/test_served_precision.py"}
    arguments = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "user_pipeline", *map(str, readers)]
    completed = subprocess.run([sys.executable, *arguments], capture_output=True, text=True, cwd=ROOT, env=environment, timeout=900)
    assert completed.returncode == 0, completed.stdout[-6000:] + completed.stderr[-2000:]
    assert " passed" in completed.stdout.strip().splitlines()[-1]


def test_the_shipped_pipelines_are_the_committed_ones():
    committed = subprocess.run(
        ["git", "ls-files", "model_repository/*/pipeline.toml"], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split()
    assert sorted(Path(path).parent.name for path in committed) == sorted(shipped.NAMES)
