"""A real RTSP server for the stream tests: GStreamer's gst-rtsp-server, serving MP4 files' H.264 as RTSP/RTP.

Run by Debian's own Python 3 (``/usr/bin/python3``, which has the GObject bindings, python3-gi, and
gir1.2-gst-rtsp-server-1.0: scripts/system-packages.sh), not by .venv: one process per server, so a test can kill it
mid-stream. Each ``--mount /path=FILE.mp4`` serves that file, paced by its timestamps; every client that connects
(every reconnect) gets the file from its start. Prints ``ready <port>`` once it listens::

    /usr/bin/python3 tests/support/rtsp_server.py --port 8554 --mount /count=scene.mp4
"""

from __future__ import annotations

import argparse
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mount", action="append", default=[], help="/path=file.mp4 (repeatable)")
    arguments = parser.parse_args()
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(arguments.port))
    mounts = server.get_mount_points()
    for mount in arguments.mount:
        path, file = mount.split("=", 1)
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch(
            f'( filesrc location="{file}" ! qtdemux ! h264parse ! identity sync=true ! rtph264pay name=pay0 pt=96 config-interval=1 )'
        )
        factory.set_shared(False)
        mounts.add_factory(path, factory)
    if server.attach(None) == 0:
        print(f"error: cannot listen on 127.0.0.1:{arguments.port}", file=sys.stderr, flush=True)
        return 1
    print(f"ready {arguments.port}", flush=True)
    GLib.MainLoop().run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
