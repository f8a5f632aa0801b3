"""The benchmark's request payloads: real photos from installed packages, re-encoded as JPEG.

Each photo is scaled so that its longer side is one of ``SIZES`` and encoded
at quality 90, as a phone or browser would send it. The set is deterministic
(same photos, sizes and encoder settings on every run), so runs compare.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2

from builders import photos

# Colour and grey photographs (no synthetic textures), varied aspect ratios.
PHOTO_NAMES = ("astronaut", "camera", "chelsea", "coffee", "coins", "motorcycle_left", "rocket", "retina")
SIZES = (320, 640, 1024)  # longer side, pixels
JPEG_QUALITY = 90


@dataclass(frozen=True)
class Payload:
    name: str
    width: int
    height: int
    data: bytes


def jpeg_payloads(names: tuple[str, ...] = PHOTO_NAMES, sizes: tuple[int, ...] = SIZES) -> list[Payload]:
    """Every photo at every size, JPEG-encoded; ordered size-major so a prefix mixes photos."""
    available = photos.registry()
    names = tuple(name for name in names if name in available)
    if not names:
        raise RuntimeError("none of the benchmark photos is installed (scikit-image provides them)")
    sources = {name: cv2.imread(str(available[name]), cv2.IMREAD_COLOR) for name in names}
    payloads = []
    for size in sizes:
        for name in names:
            image = sources[name]
            height, width = image.shape[:2]
            scale = size / max(height, width)
            new_size = (max(1, round(width * scale)), max(1, round(height * scale)))
            interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC
            resized = cv2.resize(image, new_size, interpolation=interpolation)
            ok, encoded = cv2.imencode(".jpg", resized, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
            if not ok:
                raise RuntimeError(f"OpenCV could not encode {name} as JPEG")
            payloads.append(Payload(f"{name}@{size}", new_size[0], new_size[1], encoded.tobytes()))
    return payloads


def describe(payloads: list[Payload]) -> dict:
    sizes = [len(p.data) for p in payloads]
    return {
        "count": len(payloads),
        "format": f"JPEG quality {JPEG_QUALITY}",
        "photos": sorted({p.name.split("@")[0] for p in payloads}),
        "longer_sides": sorted({max(p.width, p.height) for p in payloads}),
        "bytes_min": min(sizes),
        "bytes_mean": round(sum(sizes) / len(sizes)),
        "bytes_max": max(sizes),
    }
