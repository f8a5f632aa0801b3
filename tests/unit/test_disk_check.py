"""scripts/disk-check.sh: silent when the disk has room for what a run still writes, one warning line
when not (what .venv and .build already hold counts as written), and never a failure, on a clean
clone (no .build) too. ``df`` is a fake on PATH that reports the free space asked for."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from vision_serving import layout

SCRIPT = layout.REPOSITORY_ROOT / "scripts" / "disk-check.sh"
GB_KB = 1024 * 1024


def check(checkout: Path, tmp_path: Path, free_gb: float) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake_df = bin_dir / "df"
    fake_df.write_text(
        "#!/bin/bash\necho 'Filesystem 1024-blocks Used Available Capacity Mounted on'\n"
        f"echo '/dev/vda 100000000 0 {int(free_gb * GB_KB)} 1% /work'\n"
    )
    fake_df.chmod(0o755)
    environment = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run([str(SCRIPT), str(checkout)], capture_output=True, text=True, env=environment, timeout=60, check=False)


def test_a_clean_clone_with_room_is_silent(tmp_path):
    completed = check(tmp_path / "clone", tmp_path, free_gb=60)
    assert (completed.returncode, completed.stdout, completed.stderr) == (0, "", "")


def test_a_clean_clone_on_a_full_disk_is_warned_in_one_line(tmp_path):
    completed = check(tmp_path / "clone", tmp_path, free_gb=6.6)
    assert completed.returncode == 0 and completed.stdout == ""
    assert completed.stderr.splitlines() == [
        "test: warning: about 15 GB more disk is needed here (a run from a clean clone writes ~15 GB); 6 GB is free on /work"
    ]


def test_what_the_checkout_already_holds_is_not_needed_again(tmp_path):
    checkout = tmp_path / "clone"
    (checkout / ".build").mkdir(parents=True)
    with open(checkout / ".build" / "written", "wb") as handle:
        handle.truncate(0)
        handle.write(b"\0" * (8 << 20))  # 8 MiB really written (du counts blocks, not a sparse file's size)
    completed = check(checkout, tmp_path, free_gb=15 - 8 / 1024 + 0.001)
    assert completed.returncode == 0 and completed.stderr == ""
