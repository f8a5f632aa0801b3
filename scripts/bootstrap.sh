# Sourced by scripts/serve and scripts/test: create .venv and install the pinned
# requirements when they changed since the last run. Nothing else is installed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  if ! "$PYTHON" -c 'import sys, sysconfig; sys.exit(not ((3, 11) <= sys.version_info[:2] <= (3, 12) and sysconfig.get_config_var("Py_ENABLE_SHARED")))'; then
    echo "setup: error: need Python 3.11-3.12 built with a shared libpython (the Triton Python backend stub embeds it); set PYTHON=/path/to/python3" >&2
    exit 2
  fi
  echo "setup: creating .venv with $("$PYTHON" --version)" >&2
  "$PYTHON" -m venv "$VENV"
fi

stamp="$VENV/.requirements.sha256"
want="$(cat "$ROOT"/requirements/*.txt "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing pinned requirements into .venv (first run takes a few minutes)..." >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$ROOT/requirements/dev.txt"
  # ModelOpt alone: its [onnx] extra would swap onnxruntime for onnxruntime-gpu (requirements/quantize.txt).
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps nvidia-modelopt==0.47.0
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$ROOT"
  echo "$want" > "$stamp"
fi
