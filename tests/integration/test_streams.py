"""The stream service end to end: H.264 scenes made here, served by a real RTSP server (gst-rtsp-server), read by
the service (``python -m vision_streams``, as ``./scripts/streams`` runs it) and sent frame by frame to the run's
shared tritonserver's face_detector.

One timeline for the module (about 30 s): four streams at once, added as a user would (three through the HTTP API,
one in the config file): ``count`` (the scene, whose line and zone counts must equal its truth), ``kill`` (the same
scene from another RTSP server, killed mid-stream and restarted where a live camera would be by then: the stream
comes back with its track IDs and its counts carry on to the scene's truth), ``corrupt`` (the scene with noise in its
coded frames, over RTSP/UDP: reported, skipped packets counted) and ``unreachable`` (a port nothing listens on: reported, retried).
The other streams never notice the kill, the corruption or the dead address.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest

from devtools.loadgen import free_port
from tests.support import stream_scenes

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RTSP_SERVER = ROOT / "tests" / "support" / "rtsp_server.py"
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with python3-gi and GstRtspServer (scripts/system-packages.sh)
SCENE = stream_scenes.crossing_scene()
LINE = {"name": "middle", "start": list(stream_scenes.LINE[0]), "end": list(stream_scenes.LINE[1])}
ZONE = {"name": "right", "polygon": [list(p) for p in stream_scenes.ZONE]}
# The face detector scores these crops 0.5-0.75: the tracker's thresholds for this stream, set per stream.
TRACKER = {"high_score": 0.4, "new_track_score": 0.45}
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def wait_until(condition: Callable[[], object], timeout_s: float, what: str) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


class RtspServer:
    def __init__(self, port: int, mounts: dict[str, Path], log: Path) -> None:
        self.port, self.mounts, self.log = port, mounts, log
        self.process: subprocess.Popen | None = None

    def start(self) -> RtspServer:
        arguments = [f"--mount={path}={file}" for path, file in self.mounts.items()]
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(
                [SYSTEM_PYTHON, str(RTSP_SERVER), "--port", str(self.port), *arguments], stdout=subprocess.PIPE, stderr=log, text=True
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith("ready"), f"the RTSP server did not start: {line!r} {self.log.read_text()[-2000:]}"
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


class Service:
    def __init__(self, port: int, config: Path, jsonl: Path, triton_url: str, log: Path) -> None:
        self.url, self.jsonl = f"http://127.0.0.1:{port}", jsonl
        command = [sys.executable, "-m", "vision_streams", "--config", str(config), "--port", str(port), "--host", "127.0.0.1"]
        command += ["--triton", triton_url, "--jsonl", str(jsonl)]
        with open(log, "w") as out:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        self.log = log
        wait_until(lambda: self.call("GET", "/healthz")[0] == 200, 30, "the stream service's /healthz")

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")
        except OSError:
            return 0, {}

    def state(self, name: str) -> dict:
        status, body = self.call("GET", f"/streams/{name}")
        assert status == 200, body
        return body

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as response:
            return response.read().decode()

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.jsonl.read_text().splitlines() if line.strip()]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()


def events(records: list[dict], stream: str, session: int | None = None) -> list[dict]:
    return [r for r in records if r["type"] == "event" and r["stream"] == stream and (session is None or r.get("session") == session)]


def session_ended(service: Service, stream: str, session: int) -> bool:
    return any(e["event"] == "source_down" for e in events(service.records(), stream, session))


def resumed_session(service: Service) -> int:
    """The first session of the kill stream after the first that has frames (0 while there is none)."""
    sessions = sorted({r["session"] for r in service.records() if r["type"] == "frame" and r["stream"] == "kill"})
    return sessions[1] if len(sessions) > 1 else 0


def counts(stream_events: list[dict]) -> dict[str, dict[str, int]]:
    line = Counter(e["direction"] for e in stream_events if e["event"] == "line_crossing")
    zone = Counter(e["event"].removeprefix("zone_") for e in stream_events if e["event"] in ("zone_enter", "zone_exit"))
    return {"line": {"in": line["in"], "out": line["out"]}, "zone": {"enter": zone["enter"], "exit": zone["exit"]}}


TRUTH = {"line": stream_scenes.line_truth(SCENE, *stream_scenes.LINE), "zone": stream_scenes.zone_truth(SCENE, stream_scenes.ZONE)}


@dataclass
class Timeline:
    service: Service
    config: Path
    ids_before_kill: list[int]
    resumed: int  # the kill stream's session after its server's restart (sessions count every connection attempt)
    count_during_outage: tuple[dict, dict]  # the count stream's state when the kill happened, and 1.5 s later
    kill_down: dict  # the kill stream's state during the outage
    states: dict[str, dict]
    metrics: str


@pytest.fixture(scope="module")
def timeline(triton_server, tmp_path_factory) -> Iterator[Timeline]:
    root = tmp_path_factory.mktemp("streams")
    if not Path(SYSTEM_PYTHON).exists() or subprocess.run([SYSTEM_PYTHON, "-c", "import gi"], capture_output=True).returncode:
        pytest.fail("Debian's python3-gi and gir1.2-gst-rtsp-server-1.0 are missing: run scripts/system-packages.sh as root")
    full = SCENE.write(root / "scene.mp4")
    corrupt = stream_scenes.corrupt_mp4(full, root / "corrupt.mp4", share=0.003)
    port_a, port_b = free_port(), free_port()
    server_a = RtspServer(port_a, {"/count": full, "/corrupt": corrupt}, root / "rtsp-a.log").start()
    server_b = RtspServer(port_b, {"/kill": full}, root / "rtsp-b.log").start()
    config = root / "streams.toml"
    config.write_text(f'[[streams]]\nname = "corrupt"\nurl = "rtsp://127.0.0.1:{port_a}/corrupt"\ntransport = "udp"\n')
    service = Service(free_port(), config, root / "out.jsonl", triton_server.grpc_url, root / "service.log")
    try:
        common = {"lines": [LINE], "zones": [ZONE], "tracker": TRACKER}
        for name, body in {
            "count": {"url": f"rtsp://127.0.0.1:{port_a}/count", **common},
            "kill": {"url": f"rtsp://127.0.0.1:{port_b}/kill", "backoff_max_s": 0.5, **common},
            "unreachable": {"url": f"rtsp://127.0.0.1:{free_port()}/none", "open_timeout_s": 2},
        }.items():
            status, answer = service.call("PUT", f"/streams/{name}", body)
            assert status == 201, answer
        wait_until(lambda: service.state("kill")["tracks_alive"] >= 2, 20, "two confirmed tracks on the kill stream")
        ids_before = sorted(t["id"] for t in service.state("kill")["tracks"])
        server_b.kill()
        count_at_kill = service.state("count")
        kill_down = wait_until(
            lambda: (s := service.state("kill"))["state"] == "reconnecting" and s, 10, "the kill stream to see its server gone"
        )
        time.sleep(1.5)
        count_later = service.state("count")
        # Where a live camera would be now: the last frame's own time plus the wall time since it was decoded.
        last = [r for r in service.records() if r["type"] == "frame" and r["stream"] == "kill"][-1]
        offset = round((last["media_time"] + time.time() - last["timestamp"]) * SCENE.fps)
        remainder = SCENE.write(root / "remainder.mp4", first_frame=offset)
        server_b = RtspServer(port_b, {"/kill": remainder}, root / "rtsp-b.log").start()
        wait_until(lambda: session_ended(service, "count", 1), 30, "the count stream's scene to end")
        resumed = wait_until(lambda: resumed_session(service), 20, "the kill stream's frames after its server's restart")
        wait_until(lambda: session_ended(service, "kill", resumed), 30, "the kill stream's resumed session to end")
        states = {name: service.state(name) for name in ("count", "kill", "corrupt", "unreachable")}
        yield Timeline(service, config, ids_before, resumed, (count_at_kill, count_later), kill_down, states, service.metrics())
    finally:
        service.stop()
        server_a.kill()
        server_b.kill()


def test_a_stream_added_with_a_line_and_a_zone_counts_its_scene(timeline):
    """The count stream's first session (the scene once) gives exactly the scene's crossings and zone entries."""
    assert TRUTH == {"line": {"in": 1, "out": 1}, "zone": {"enter": 2, "exit": 1}}
    first = events(timeline.service.records(), "count", session=1)
    assert counts(first) == TRUTH, first
    frames = [r for r in timeline.service.records() if r["type"] == "frame" and r["stream"] == "count" and r["session"] == 1]
    ids = {t["id"] for frame in frames for t in frame["tracks"]}
    assert len(ids) == 2, f"two faces, two track IDs; got {sorted(ids)}"
    assert all(frame["timestamp"] > 0 and frame["sequence"] >= 1 for frame in frames)
    exits = [e for e in first if e["event"] == "zone_exit"]
    # The face leaving the zone was inside from the start (its first confirmed frame, about a second in: the RTSP
    # probe and the two frames a track needs) to 4.7 s.
    assert 3.0 < exits[0]["dwell_s"] < 5.0


def test_the_server_killed_mid_stream_is_reconnected_with_its_ids_and_counts_carry_on(timeline):
    kill = timeline.states["kill"]
    down = timeline.kill_down
    assert down["reconnects"] >= 1 and down["last_error"], down
    resumed = timeline.resumed
    assert kill["session"] >= resumed >= 2 and kill["reconnects"] >= resumed - 1
    second = [r for r in timeline.service.records() if r["type"] == "frame" and r["stream"] == "kill" and r["session"] == resumed]
    ids_after = {t["id"] for frame in second[:20] for t in frame["tracks"]}
    assert set(timeline.ids_before_kill) <= ids_after, (timeline.ids_before_kill, ids_after)
    kept = [e for e in events(timeline.service.records(), "kill") if e["event"] == "tracks_kept"]
    assert kept and kept[0]["session"] == resumed
    # Crossings that happened while the server was down are counted when the tracks are seen again on the other side.
    until_resumed_end = [e for e in events(timeline.service.records(), "kill") if e.get("session", 0) <= resumed]
    assert counts(until_resumed_end) == TRUTH, until_resumed_end


def test_the_other_streams_never_notice(timeline):
    at_kill, later = timeline.count_during_outage
    assert at_kill["session"] == later["session"] == 1 and at_kill["reconnects"] == 0
    assert later["answered"] >= at_kill["answered"] + 10, "the count stream stalled while the kill stream's server was down"
    assert later["state"] == "streaming" and later["failed"] == 0


def test_a_corrupt_stream_and_an_unreachable_url_are_reported(timeline):
    corrupt, unreachable = timeline.states["corrupt"], timeline.states["unreachable"]
    assert corrupt["corrupt"] > 0 and corrupt["answered"] > 20, corrupt
    assert unreachable["answered"] == 0 and unreachable["reconnects"] >= 2 and unreachable["state"] in ("reconnecting", "connecting")
    assert "refused" in unreachable["last_error"].lower(), unreachable["last_error"]
    down = events(timeline.service.records(), "unreachable")
    assert down and down[0]["event"] == "source_down" and "refused" in down[0]["reason"].lower(), down


def test_metrics_per_stream(timeline):
    text = timeline.metrics

    samples = {}
    for name, labels, number in re.findall(r"^(\w+)\{([^}]*)\} (\S+)$", text, re.MULTILINE):
        samples[name, frozenset(re.findall(r'(\w+)="([^"]*)"', labels))] = float(number)

    def value(name: str, **labels: str) -> float:
        key = (name, frozenset(labels.items()))
        assert key in samples, f"{name}{labels} not in /metrics"
        return samples[key]

    count = timeline.states["count"]
    assert value("vision_stream_frames_out_total", stream="count") >= count["answered"] - 20
    assert value("vision_stream_frames_in_total", stream="count") > 100
    assert value("vision_stream_frames_dropped_total", stream="count") == pytest.approx(count["dropped"], abs=20)
    assert value("vision_stream_reconnects_total", stream="kill") >= 2
    assert value("vision_stream_up", stream="unreachable") == 0
    assert value("vision_stream_corrupt_packets_total", stream="corrupt") > 0
    assert value("vision_stream_line_crossings_total", stream="count", line="middle", direction="in", label="face") >= 1
    assert value("vision_stream_latency_seconds_count", stream="count") > 100
    assert value("vision_stream_tracks_alive", stream="count") >= 0


def test_the_api_changes_streams_while_running_and_refuses_bad_ones_by_name(timeline):
    service = timeline.service
    status, body = service.call("PUT", "/streams/count2", {"url": "rtsp://x/y", "fps": 500})
    assert status == 400 and "fps must be" in body["error"]
    status, body = service.call("PUT", "/streams/count2", {"url": "rtsp://x/y", "colour": "red"})
    assert status == 400 and "colour" in body["error"]
    status, body = service.call("PUT", "/streams/corrupt", {"url": "rtsp://x/y"})
    assert status == 409 and "config file" in body["error"]
    assert service.call("GET", "/streams/none")[0] == 404
    # A change restarts that stream alone.
    status, body = service.call("PUT", "/streams/unreachable", {"url": "rtsp://127.0.0.1:9/none", "fps": 5})
    assert status == 200 and body["fps"] == 5
    assert service.state("count")["session"] >= 1 and service.state("count")["answered"] >= timeline.states["count"]["answered"]
    assert service.call("DELETE", "/streams/unreachable") == (200, {"deleted": "unreachable"})
    names = {s["name"] for s in service.call("GET", "/streams")[1]["streams"]}
    assert names == {"count", "kill", "corrupt"}


def test_the_config_file_is_re_read_and_a_broken_one_changes_nothing(timeline):
    service, config = timeline.service, timeline.config
    original = config.read_text()
    late = re.sub(r'name = "corrupt"', 'name = "late"', original)
    config.write_text(original + "\n" + late)
    wait_until(lambda: "late" in service.call("GET", "/status")[1]["streams"], 15, "the added stream to start")
    config.write_text("[[streams]\nname = ")
    wait_until(lambda: service.call("GET", "/status")[1]["config_error"], 15, "the broken file to be reported")
    assert {"late", "corrupt", "count"} <= set(service.call("GET", "/status")[1]["streams"])
    config.write_text(original)
    wait_until(lambda: "late" not in service.call("GET", "/status")[1]["streams"], 15, "the removed stream to stop")
    assert service.call("GET", "/status")[1]["config_error"] == ""


def screenshot(url: str, path: Path, profile: Path) -> np.ndarray:
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: run scripts/system-packages.sh as root"
    subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=640,520", "--timeout=3000", f"--screenshot={path}", url],
        capture_output=True,
        timeout=60,
        check=True,
    )
    image = cv2.imread(str(path))
    assert image is not None, f"chromium wrote no screenshot {path}"
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def test_the_preview_page_shows_changing_frames_with_the_tracks_drawn(timeline, tmp_path):
    """Headless Chromium on the count stream's preview (its scene replays: the source reconnects at its end): two
    screenshots a second apart differ in the video, and show the line (yellow) and the track boxes in their IDs'
    colours."""
    from vision_streams.preview import LINE_COLOR, track_color

    service = timeline.service
    url = f"{service.url}/streams/count/preview"
    wait_until(lambda: service.state("count")["tracks"], 20, "tracks on the count stream")
    first = screenshot(url, tmp_path / "first.png", tmp_path / "profile-1")
    time.sleep(1.0)
    second = screenshot(url, tmp_path / "second.png", tmp_path / "profile-2")
    video = (slice(0, SCENE.height), slice(0, SCENE.width))  # the <img>, at the page's top left
    assert np.abs(first[video].astype(int) - second[video].astype(int)).mean() > 1.0, "the preview's frames do not change"
    ids = {t["id"] for t in service.state("count")["tracks"]} | {t["id"] for t in timeline.states["count"]["tracks"]}

    def has(image: np.ndarray, color: tuple[int, int, int]) -> bool:
        return bool((np.abs(image[video].astype(int) - color).max(axis=2) <= 40).sum() > 50)

    assert has(first, LINE_COLOR) and has(second, LINE_COLOR), "the line is not drawn"
    assert any(has(second, track_color(i)) or has(first, track_color(i)) for i in range(1, max(ids) + 3)), "no track box drawn"
