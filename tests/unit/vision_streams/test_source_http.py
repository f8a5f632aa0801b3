"""Network sources over HTTP (vision_streams.source): HLS (a playlist and its segments, written here by FFmpeg's
own HLS muxer through PyAV) and MJPEG (multipart/x-mixed-replace, FFmpeg's mpjpeg demuxer), each from a real HTTP
server in the test (aiohttp, on the loopback)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pytest
import simplejpeg
from aiohttp import web

from tests.support import stream_scenes
from vision_streams.config import StreamConfig


class HttpServer:
    """An aiohttp server in a thread of its own: static files under ``root`` and an MJPEG endpoint, /camera.mjpeg."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, 0
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        app = web.Application()
        app.add_routes([web.get("/camera.mjpeg", self._mjpeg), web.static("/hls", self.root)])
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.ready.set()
        self.loop.run_forever()

    async def _mjpeg(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "multipart/x-mixed-replace; boundary=frame"})
        await response.prepare(request)
        for index in range(40):
            image = np.zeros((48, 64, 3), np.uint8)
            image[:, (index * 2) % 64 :] = 180
            jpeg = simplejpeg.encode_jpeg(image, quality=90, colorspace="RGB")
            await response.write(b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n" % len(jpeg) + jpeg + b"\r\n")
            await asyncio.sleep(0.05)
        return response

    def start(self) -> HttpServer:
        self.thread.start()
        self.ready.wait(10)
        return self

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def server(tmp_path) -> Iterator[HttpServer]:
    running = HttpServer(tmp_path).start()
    yield running
    running.stop()


def write_hls(folder: Path, frames: int = 30, fps: int = 10) -> Path:
    playlist = folder / "index.m3u8"
    with av.open(str(playlist), "w", format="hls", options={"hls_time": "1", "hls_list_size": "0", "hls_playlist_type": "vod"}) as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.options = {"g": str(fps), "preset": "ultrafast"}
        for index in range(frames):
            image = np.zeros((48, 64, 3), np.uint8)
            image[:, (index * 2) % 64 :] = 180
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return playlist


def test_hls_over_http(server, tmp_path):
    write_hls(tmp_path)
    url = f"http://127.0.0.1:{server.port}/hls/index.m3u8"
    stats, frames, _ = stream_scenes.read_source(StreamConfig("hls", url, fps=10, realtime=True, backoff_initial_s=5), 2.5)
    assert stats.codec == "h264" and len(frames) >= 15, stats
    assert frames[0].pixels.shape == (48, 64, 3) and [f.session for f in frames] == [1] * len(frames)


def test_mjpeg_over_http(server):
    url = f"http://127.0.0.1:{server.port}/camera.mjpeg"
    stats, frames, _ = stream_scenes.read_source(StreamConfig("mjpeg", url, fps=10, format="mpjpeg", backoff_initial_s=5), 2.5)
    assert stats.codec == "mjpeg" and len(frames) >= 10, stats
    assert frames[0].pixels.shape == (48, 64, 3)
