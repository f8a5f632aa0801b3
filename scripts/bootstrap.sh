# Sourced by scripts/serve and scripts/test: create .venv and install the locked
# requirements (requirements/dev.txt, every package pinned and hashed, installed with
# --require-hashes) when they changed since the last run. Nothing else is installed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  if ! "$PYTHON" -c 'import sys, sysconfig; sys.exit(not (sys.version_info[:2] == (3, 11) and sysconfig.get_config_var("Py_ENABLE_SHARED")))'; then
    echo "setup: error: need Python 3.11 (requirements/dev.txt is locked for it) built with a shared libpython (the Triton Python backend stub embeds it); set PYTHON=/path/to/python3.11" >&2
    exit 2
  fi
  echo "setup: creating .venv with $("$PYTHON" --version)" >&2
  "$PYTHON" -m venv "$VENV"
fi

stamp="$VENV/.requirements.sha256"
want="$(cat "$ROOT"/requirements/*.txt "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing the locked requirements (requirements/dev.txt) into .venv (first run takes a few minutes)..." >&2
  # pip itself first: Python 3.11's bundled pip 23.2 fails --require-hashes on a dependency's extras (requirements/pip.in).
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r "$ROOT/requirements/pip.txt"
  # torch alone next: dev.txt locks its CPU build (+cpu) by hash, and PyPI's Linux torch is the CUDA build. Taken
  # from the configured sources (a wheel cache, PIP_FIND_LINKS) when they have it, else from PyTorch's CPU index.
  torch_lock="$(mktemp)"
  awk '/^torch==/ {found=1} found {print} found && !/\\$/ {exit}' "$ROOT/requirements/dev.txt" > "$torch_lock"
  if ! "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --require-hashes -r "$torch_lock" 2>/dev/null; then
    echo "setup: torch's CPU wheel is not in the configured sources; taking it from https://download.pytorch.org/whl/cpu" >&2
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --require-hashes \
      --extra-index-url https://download.pytorch.org/whl/cpu -r "$torch_lock"
  fi
  rm -f "$torch_lock"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r "$ROOT/requirements/dev.txt"
  # ModelOpt alone: its [onnx] extra would swap onnxruntime for onnxruntime-gpu (requirements/modelopt.in).
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --require-hashes -r "$ROOT/requirements/modelopt.txt"
  # The repository itself, editable: built from the local tree (setuptools from dev.txt), nothing downloaded, nothing to hash.
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$ROOT"
  echo "$want" > "$stamp"
fi
