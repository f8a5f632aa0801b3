"""Stream sources (vision_streams.source): pacing, the one-frame mailbox, and PyAV reading real H.264 files, a
corrupt one and a missing one, with reconnects and their backoff."""

from __future__ import annotations

import asyncio

import av
import numpy as np
import pytest

from tests.support import stream_scenes
from vision_streams.config import StreamConfig
from vision_streams.source import Mailbox, Pacer


def write_clip(path, frames: int = 30, fps: int = 30, size=(96, 64)) -> None:
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        stream.options = {"g": "10", "preset": "ultrafast"}
        for index in range(frames):
            image = np.zeros((size[1], size[0], 3), np.uint8)
            image[:, (index * 3) % size[0] :] = 200
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def test_pacer_keeps_every_third_frame_of_30_fps_at_10():
    pacer = Pacer(10)
    kept = [i for i in range(90) if pacer.due(i / 30)]
    assert kept == list(range(0, 90, 3))
    assert pacer.due(100.0)  # a gap (or a new session) starts over
    assert pacer.due(0.0)  # and so does a jump back


def test_mailbox_replaces_a_waiting_frame_and_counts_it():
    async def scenario():
        drops = []
        mailbox = Mailbox(asyncio.get_running_loop(), lambda: drops.append(1))
        mailbox.put("first")  # type: ignore[arg-type]
        mailbox.put("second")  # type: ignore[arg-type]
        got = await mailbox.get()
        mailbox.put("third")  # type: ignore[arg-type]
        return got, await mailbox.get(), len(drops)

    assert asyncio.run(scenario()) == ("second", "third", 1)


def test_a_file_is_read_at_its_own_pace_paced_to_the_stream_rate_and_reopened_when_it_ends(tmp_path):
    clip = tmp_path / "clip.mp4"
    write_clip(clip, frames=15, fps=30)  # half a second
    stats, frames, events = stream_scenes.read_source(StreamConfig("clip", str(clip), fps=10, backoff_initial_s=0.2), 1.6)
    assert stats.reconnects >= 2 and stats.session >= 3, stats
    assert stats.last_error == "ended: the source has no more frames"
    first = [f for f in frames if f.session == 1]
    assert len(first) == 5 and stats.skipped >= 10
    assert [f.sequence for f in frames] == list(range(1, len(frames) + 1))
    assert first[0].pixels.shape == (64, 96, 3) and first[-1].media_time == pytest.approx(12 / 30, abs=0.01)
    # Read in real time: the session's five frames span its 0.4 s.
    assert first[-1].clock - first[0].clock == pytest.approx(0.4, abs=0.12)
    assert first[-1].stream_time - first[0].stream_time == pytest.approx(0.4, abs=0.01)
    assert [e["event"] for e in events[:3]] == ["source_up", "source_down", "source_up"]


def test_corrupt_packets_are_skipped_and_counted(tmp_path):
    clip = tmp_path / "clip.h264"
    write_clip(tmp_path / "clean.mp4", frames=60)
    with av.open(str(tmp_path / "clean.mp4")) as source, open(clip, "wb") as out:
        bsf = av.BitStreamFilterContext("h264_mp4toannexb", source.streams.video[0])
        rng = np.random.default_rng(0)
        for index, packet in enumerate(source.demux(source.streams.video[0])):
            for filtered in bsf.filter(packet):
                data = bytearray(bytes(filtered))
                if index % 4 == 2 and len(data) > 12:  # garbage in a quarter of the slices
                    data[8:] = rng.integers(0, 256, len(data) - 8, dtype=np.uint8).tobytes()
                out.write(bytes(data))
    stats, _, _ = stream_scenes.read_source(StreamConfig("bad", str(clip), fps=30, realtime=False, backoff_initial_s=5), 1.5)
    assert stats.corrupt > 0 and stats.kept > 0 and stats.session == 1, stats


def test_a_missing_source_is_reported_and_retried_with_doubling_backoff(tmp_path):
    stats, frames, events = stream_scenes.read_source(
        StreamConfig("missing", str(tmp_path / "none.mp4"), backoff_initial_s=0.1, backoff_max_s=0.4), 1.3
    )
    assert frames == [] and stats.state == "stopped" and stats.reconnects >= 4
    assert "No such file" in stats.last_error
    waits = [e["retry_in_s"] for e in events if e["event"] == "source_down"]
    assert waits[:4] == [0.1, 0.2, 0.4, 0.4]
