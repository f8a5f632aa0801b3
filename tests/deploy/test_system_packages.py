"""scripts/system-packages.sh: nothing to do when the tools are there; otherwise one line (not root),
exit 2 under CI, or apt-get with services kept from starting (root). apt-get, id and systemctl are
fakes on a PATH without /usr/bin, so the install path runs here without touching the system."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from vision_serving import layout

SCRIPT = layout.REPOSITORY_ROOT / "scripts" / "system-packages.sh"


def fake(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


def run(bin_dir: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The script with only ``bin_dir`` and bash's own basics on PATH (so /usr/bin/promtool is not found)."""
    basics = tmp_path / "basics"
    basics.mkdir(exist_ok=True)
    for tool in ("chmod", "rm", "touch"):
        if not (basics / tool).exists():
            (basics / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")
    environment = {"PATH": f"{bin_dir}:{basics}", "POLICY_RC_D": str(tmp_path / "policy-rc.d"), **env}
    return subprocess.run(["/bin/bash", str(SCRIPT)], capture_output=True, text=True, env=environment, timeout=60, check=False)


def test_does_nothing_when_every_tool_is_installed():
    """The path taken on this machine and on every run after the first: no apt-get, no output."""
    if not (shutil.which("promtool") and shutil.which("prometheus") and (shutil.which("nginx") or Path("/usr/sbin/nginx").exists())):
        pytest.fail("prometheus/promtool or nginx is missing: run ./scripts/system-packages.sh as root")
    completed = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=30, check=False)
    assert completed.returncode == 0 and completed.stdout == "" and completed.stderr == ""


@pytest.mark.skipif(not Path("/usr/sbin/nginx").exists(), reason="needs Debian's nginx in /usr/sbin (not on a user's PATH)")
def test_not_root_prints_one_line_and_continues_but_fails_under_ci(tmp_path):
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "id", "echo 1000")
    fake(bin_dir, "apt-get", f"touch {tmp_path}/apt-get-ran")
    completed = run(bin_dir, tmp_path)
    assert completed.returncode == 0 and completed.stdout == ""
    (line,) = completed.stderr.splitlines()
    assert line.startswith("system-packages: warning: missing prometheus promtool: install the Debian package(s) prometheus ")
    assert "nginx" not in line, "nginx is found in /usr/sbin even off PATH"
    completed = run(bin_dir, tmp_path, CI="true")
    assert completed.returncode == 2
    (line,) = completed.stderr.splitlines()
    assert line.startswith("system-packages: error: missing prometheus promtool")
    assert not (tmp_path / "apt-get-ran").exists()


def test_root_installs_missing_packages_without_starting_their_services(tmp_path):
    """The fake apt-get records its calls and whether policy-rc.d forbade service starts while it ran,
    then 'installs' the tools; the temporary policy-rc.d is gone afterwards."""
    bin_dir = tmp_path / "bin"
    policy = tmp_path / "policy-rc.d"
    log = tmp_path / "apt-get.log"
    fake(bin_dir, "id", "echo 0")
    fake(
        bin_dir,
        "apt-get",
        f'echo "DEBIAN_FRONTEND=$DEBIAN_FRONTEND $*" >> {log}\n'
        f'{policy} prometheus start; echo "policy=$?" >> {log}\n'
        f'if [ "$1" = install ]; then for t in prometheus promtool nginx; do printf "#!/bin/bash\\n" > {bin_dir}/$t; chmod +x {bin_dir}/$t; done; fi',
    )
    completed = run(bin_dir, tmp_path)
    assert completed.returncode == 0, completed.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "DEBIAN_FRONTEND=noninteractive update -qq"
    assert calls[1] == "policy=101"
    expected = "nginx-light" if not Path("/usr/sbin/nginx").exists() else ""
    assert calls[2] == f"DEBIAN_FRONTEND=noninteractive install -y -qq --no-install-recommends prometheus {expected}".strip()
    assert calls[3] == "policy=101"
    assert not policy.exists(), "the temporary policy-rc.d is removed"
    assert completed.stderr.splitlines() == [f"system-packages: installing prometheus {expected}".strip() + " (apt-get)..."]
    # Second run: everything is there, nothing happens.
    log.unlink()
    completed = run(bin_dir, tmp_path)
    assert completed.returncode == 0 and completed.stderr == "" and not log.exists()


def test_root_keeps_an_existing_policy_and_reports_a_failed_install(tmp_path):
    bin_dir = tmp_path / "bin"
    policy = tmp_path / "policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    fake(bin_dir, "id", "echo 0")
    fake(bin_dir, "apt-get", '[ "$1" = update ] || exit 100')
    completed = run(bin_dir, tmp_path)
    assert completed.returncode == 2
    assert completed.stderr.splitlines()[-1].startswith("system-packages: error: apt-get install prometheus")
    assert policy.read_text() == "#!/bin/sh\nexit 101\n", "a policy-rc.d that was there stays"


def test_root_installs_jemalloc_when_the_library_is_missing(tmp_path):
    """jemalloc is a library, not a tool: its file is looked for (JEMALLOC_GLOB here points nowhere)."""
    bin_dir = tmp_path / "bin"
    log = tmp_path / "apt-get.log"
    fake(bin_dir, "id", "echo 0")
    for tool in ("prometheus", "promtool", "nginx"):
        fake(bin_dir, tool, "")
    library = tmp_path / "lib" / "libjemalloc.so.2"
    library.parent.mkdir()
    fake(bin_dir, "apt-get", f'echo "$*" >> {log}; [ "$1" = install ] && touch {library}; true')
    completed = run(bin_dir, tmp_path, JEMALLOC_GLOB=str(library))
    assert completed.returncode == 0, completed.stderr
    assert log.read_text().splitlines()[-1] == "install -y -qq --no-install-recommends libjemalloc2"
    assert completed.stderr.splitlines() == ["system-packages: installing libjemalloc2 (apt-get)..."]
    library.unlink()
    fake(bin_dir, "apt-get", f'echo "$*" >> {log}')  # an install that leaves it missing
    completed = run(bin_dir, tmp_path, JEMALLOC_GLOB=str(library))
    assert completed.returncode == 2 and completed.stderr.splitlines()[-1].startswith(
        "system-packages: error: libjemalloc.so.2 still missing"
    )


def test_root_installs_the_browser_and_its_driver_when_debians_are_missing(tmp_path):
    """The page test's chromium and chromedriver are looked for in Debian's folder (BROWSER_DIR here: an empty one)."""
    bin_dir, browsers = tmp_path / "bin", tmp_path / "browsers"
    browsers.mkdir()
    log = tmp_path / "apt-get.log"
    fake(bin_dir, "id", "echo 0")
    for tool in ("prometheus", "promtool", "nginx"):
        fake(bin_dir, tool, "")
    fake(
        bin_dir,
        "apt-get",
        f'echo "$*" >> {log}; [ "$1" = install ] && touch {browsers}/chromium {browsers}/chromedriver && chmod +x {browsers}/*; true',
    )
    completed = run(bin_dir, tmp_path, BROWSER_DIR=str(browsers), JEMALLOC_GLOB="/")
    assert completed.returncode == 0, completed.stderr
    assert log.read_text().splitlines()[-1] == "install -y -qq --no-install-recommends chromium chromium-driver"
    assert completed.stderr.splitlines() == ["system-packages: installing chromium chromium-driver (apt-get)..."]


def test_root_installs_the_stream_tests_packages_when_their_files_are_missing(tmp_path):
    """The RTSP server's GStreamer bindings and plugins and chromium are files (SYSTEM_ROOT here is empty)."""
    bin_dir = tmp_path / "bin"
    log = tmp_path / "apt-get.log"
    root = tmp_path / "root"
    browsers = tmp_path / "browsers"  # chromium is the browser test's tool, found apart (BROWSER_DIR)
    browsers.mkdir()
    (browsers / "chromium").touch(mode=0o755)
    (browsers / "chromedriver").touch(mode=0o755)
    fake(bin_dir, "id", "echo 0")
    for tool in ("prometheus", "promtool", "nginx"):
        fake(bin_dir, tool, "")
    files = [
        "usr/lib/x86_64-linux-gnu/girepository-1.0/GstRtspServer-1.0.typelib",
        "usr/lib/python3/dist-packages/gi/__init__.py",
        "usr/lib/x86_64-linux-gnu/gstreamer-1.0/libgstisomp4.so",
        "usr/lib/x86_64-linux-gnu/gstreamer-1.0/libgstvideoparsersbad.so",
    ]
    touch = "; ".join(f"/bin/mkdir -p {(root / f).parent}; /usr/bin/touch {root / f}" for f in files)
    fake(bin_dir, "apt-get", f'echo "$*" >> {log}; if [ "$1" = install ]; then {touch}; fi; true')
    completed = run(bin_dir, tmp_path, SYSTEM_ROOT=str(root), BROWSER_DIR=str(browsers), JEMALLOC_GLOB="/")
    assert completed.returncode == 0, completed.stderr
    wanted = "gir1.2-gst-rtsp-server-1.0 python3-gi gstreamer1.0-plugins-good gstreamer1.0-plugins-bad"
    assert log.read_text().splitlines()[-1] == f"install -y -qq --no-install-recommends {wanted}"
    completed = run(bin_dir, tmp_path, SYSTEM_ROOT=str(root), BROWSER_DIR=str(browsers), JEMALLOC_GLOB="/")
    assert completed.returncode == 0 and completed.stderr == ""
