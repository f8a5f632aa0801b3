#!/usr/bin/env bash
# Run by scripts/test before the tests: a warning line when the disk of the checkout has less free space
# than a run still needs. A run from a clean clone writes about 15 GB (measured: .venv 3.3 GB; .build 10 GB,
# of which the YOLO and SAHI tests' Ultralytics environment with PyTorch's CUDA build is 5 GB; pytest's
# temporary folders 1 GB); what .venv and .build already hold is not needed again. A full disk would otherwise fail
# hundreds of tests with "No space left on device" in their middle. Never fails the run.
#   scripts/disk-check.sh [CHECKOUT]     (default: this script's checkout)
set -euo pipefail
root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
run_kb=$((15 * 1024 * 1024))
written_kb=$( (du -sk "$root/.venv" "$root/.build" 2>/dev/null || true) | awk '{s += $1} END {print s + 0}')
need_kb=$((run_kb - written_kb))
read -r free_kb mount < <(df -Pk "$root" | awk 'NR == 2 {print $4, $6}')
if [ "$need_kb" -gt "$free_kb" ]; then
  echo "test: warning: about $(((need_kb + 1048575) / 1048576)) GB more disk is needed here (a run from a clean clone writes ~15 GB); $((free_kb / 1048576)) GB is free on $mount" >&2
fi
