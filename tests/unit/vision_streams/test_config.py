"""The service's config file and API bodies (vision_streams.config): defaults, and errors that name the key."""

from __future__ import annotations

import pytest

from vision_streams.config import ConfigError, ServiceConfig, StreamConfig

TRIANGLE = [[0, 0], [1, 0], [1, 1]]
FILE = """
[service]
triton_url = "triton:8001"
jsonl = ""
webhooks = ["http://127.0.0.1:9/hook"]

[[streams]]
name = "gate"
url = "rtsp://camera:8554/gate"
transport = "udp"
fps = 5
lines = [{ name = "door", start = [0, 100], end = [640, 100] }]
zones = [{ name = "desk", polygon = [[0, 0], [10, 0], [10, 10]] }]
tracker = { kind = "sort", lost_seconds = 2.0 }

[[streams]]
name = "lobby"
url = "/videos/lobby.mp4"
"""


def test_a_file_with_two_streams(tmp_path):
    path = tmp_path / "streams.toml"
    path.write_text(FILE)
    config = ServiceConfig.load(path)
    gate, lobby = config.streams
    assert config.triton_url == "triton:8001" and config.webhooks == ("http://127.0.0.1:9/hook",)
    assert gate.transport == "udp" and gate.fps == 5 and gate.tracker.kind == "sort" and gate.tracker.lost_seconds == 2.0
    assert gate.lines[0].end == (640.0, 100.0) and len(gate.zones[0].polygon) == 3
    assert not gate.is_file and not gate.reads_realtime
    assert lobby.is_file and lobby.reads_realtime and lobby.model == "face_detector" and lobby.fps == 10.0
    assert StreamConfig.from_mapping(gate.as_json()) == gate


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"name": "a b", "url": "x.mp4"}, "stream name"),
        ({"name": "a", "url": "gopher://x"}, "is not rtsp://"),
        ({"name": "a", "url": "x.mp4", "fps": 0}, "fps must be"),
        ({"name": "a", "url": "x.mp4", "transport": "sctp"}, "transport"),
        ({"name": "a", "url": "x.mp4", "fsp": 10}, "unknown key.*fsp"),
        ({"name": "a", "url": "x.mp4", "tracker": {"kind": "x"}}, "tracker kind"),
        ({"name": "a", "url": "x.mp4", "lines": [{"name": "l", "start": [0, 0]}]}, "a point is"),
        ({"name": "a", "url": "x.mp4", "zones": [{"name": "z", "polygon": [[0, 0]], "colour": 1}]}, "a zone is"),
        (
            {
                "name": "a",
                "url": "x.mp4",
                "lines": [{"name": "n", "start": [0, 0], "end": [1, 1]}],
                "zones": [{"name": "n", "polygon": TRIANGLE}],
            },
            "unique",
        ),
        ({"url": "x.mp4"}, "name .a string. is required"),
    ],
)
def test_bad_streams_are_refused_by_name(values, message):
    with pytest.raises(ConfigError, match=message):
        StreamConfig.from_mapping(values)


def test_an_api_body_takes_its_name_from_the_path():
    assert StreamConfig.from_mapping({"url": "x.mp4"}, name="cam").name == "cam"
    with pytest.raises(ConfigError, match="differs"):
        StreamConfig.from_mapping({"name": "other", "url": "x.mp4"}, name="cam")


def test_service_errors(tmp_path):
    with pytest.raises(ConfigError, match="declared twice: a"):
        ServiceConfig.from_mapping({"streams": [{"name": "a", "url": "x"}, {"name": "a", "url": "y"}]})
    with pytest.raises(ConfigError, match=r"\[service\]: unknown key\(s\) port"):
        ServiceConfig.from_mapping({"service": {"port": 1}})
    with pytest.raises(ConfigError, match="top-level"):
        ServiceConfig.from_mapping({"stream": []})
    broken = tmp_path / "broken.toml"
    broken.write_text("[[streams]\n")
    with pytest.raises(ConfigError, match=r"broken\.toml"):
        ServiceConfig.load(broken)
