"""The preview of one stream: its latest answered frame with the zones, lines (and their counts), boxes, track IDs
and trails drawn (OpenCV), served as MJPEG (``multipart/x-mixed-replace``) and embedded in a small HTML page that
also lists the tracks (``GET /streams/<name>/preview``)."""

from __future__ import annotations

import html

import cv2
import numpy as np

from .analytics import Analytics
from .detector import encode_jpeg
from .tracking import TrackedObject

BOUNDARY = "frame"
ZONE_COLOR = (255, 170, 0)
LINE_COLOR = (255, 255, 0)


def track_color(track_id: int) -> tuple[int, int, int]:
    """A stable, saturated colour per ID (golden-angle hues), RGB."""
    hue = int((track_id * 137.508) % 180)
    bgr = cv2.cvtColor(np.array([[[hue, 220, 255]]], dtype=np.uint8), cv2.COLOR_HSV2BGR)[0, 0]
    return int(bgr[2]), int(bgr[1]), int(bgr[0])


def draw(pixels: np.ndarray, tracks: list[TrackedObject], analytics: Analytics) -> np.ndarray:
    """A copy of an RGB frame with the stream's zones, lines, tracks and trails drawn."""
    image = np.ascontiguousarray(pixels).copy()
    scale = max(1, round(max(image.shape[:2]) / 640))
    overlay = image.copy()
    for zone in analytics.zones:
        polygon = np.array(zone.spec.polygon, dtype=np.int32).reshape(-1, 1, 2)
        cv2.fillPoly(overlay, [polygon], ZONE_COLOR)
    image = cv2.addWeighted(overlay, 0.25, image, 0.75, 0)
    for zone in analytics.zones:
        polygon = np.array(zone.spec.polygon, dtype=np.int32).reshape(-1, 1, 2)
        cv2.polylines(image, [polygon], True, ZONE_COLOR, scale)
        occupancy = sum(zone.occupancy.values())
        x, y = polygon[0, 0]
        _text(image, f"{zone.spec.name}: {occupancy}", (int(x) + 4, int(y) + 16 * scale), ZONE_COLOR, scale)
    for counter in analytics.lines:
        start = tuple(int(v) for v in counter.spec.start)
        end = tuple(int(v) for v in counter.spec.end)
        cv2.line(image, start, end, LINE_COLOR, 2 * scale)
        counts = f"{counter.spec.name} in {sum(counter.counts_in.values())} out {sum(counter.counts_out.values())}"
        _text(image, counts, (start[0] + 4, start[1] - 6 * scale), LINE_COLOR, scale)
    for track in tracks:
        color = track_color(track.track_id)
        x0, y0, x1, y1 = (round(v) for v in track.box)
        cv2.rectangle(image, (x0, y0), (x1, y1), color, 2 * scale)
        if len(track.trail) > 1:
            cv2.polylines(image, [np.array(track.trail, dtype=np.int32).reshape(-1, 1, 2)], False, color, scale)
        _text(image, f"#{track.track_id} {track.label}", (x0, max(y0 - 4 * scale, 12 * scale)), color, scale)
    return image


def _text(image: np.ndarray, text: str, origin: tuple[int, int], color: tuple[int, int, int], scale: int) -> None:
    cv2.putText(image, text, origin, cv2.FONT_HERSHEY_SIMPLEX, 0.5 * scale, (0, 0, 0), 3 * scale, cv2.LINE_AA)
    cv2.putText(image, text, origin, cv2.FONT_HERSHEY_SIMPLEX, 0.5 * scale, color, scale, cv2.LINE_AA)


def mjpeg_part(pixels: np.ndarray) -> bytes:
    jpeg = encode_jpeg(pixels, 80)
    return f"--{BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n\r\n".encode() + jpeg + b"\r\n"


def page(name: str) -> str:
    """The preview page: the MJPEG image and the stream's tracks and counts, refreshed every half second."""
    quoted = html.escape(name)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{quoted} preview</title>
<style>body{{font-family:sans-serif;margin:0;background:#111;color:#eee}} img{{display:block}}
pre,p,h1{{margin:8px;font-size:12px}}</style></head>
<body><img id="video" src="/streams/{quoted}/preview.mjpeg" alt="{quoted}">
<h1>{quoted}</h1><p id="summary">waiting for the stream</p><pre id="tracks"></pre>
<script>
async function refresh() {{
  try {{
    const state = await (await fetch("/streams/{quoted}")).json();
    document.getElementById("summary").textContent =
      `${{state.state}}: ${{state.answered}} frames answered, ${{state.dropped}} dropped, ${{state.tracks_alive}} tracks alive`;
    document.getElementById("tracks").textContent = state.tracks.map(t => `#${{t.id}} ${{t.label}} ${{t.box.join(", ")}}`).join("\\n")
      + "\\n" + JSON.stringify(state.analytics);
  }} catch (error) {{ document.getElementById("summary").textContent = String(error); }}
}}
setInterval(refresh, 500); refresh();
</script></body></html>
"""
