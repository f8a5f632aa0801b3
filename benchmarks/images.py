"""The benchmark's request payloads: real photos from installed packages, re-encoded as JPEG.

Each photo is scaled so that its longer side is one of ``SIZES`` and encoded
at quality 90, as a phone or browser would send it. The set is deterministic
(same photos, sizes and encoder settings on every run), so runs compare.

Upload mixes (``upload_mix``), what users send:

- ``thumbnail``: longer side 150 px;
- ``web``: longer side 640, 1024 and 1280 px;
- ``phone``: 12 MP phone photos, 4000 x 3000, JPEG quality 90, 2.5-4 MB. The
  installed photos are at most 0.5 MP, so each is cropped to 4:3, upscaled
  (bicubic) and given mild sensor-like noise, so that it compresses like a
  phone photo (an upscaled photo alone is too smooth: ~0.6 MB). Every other
  one is stored sideways with EXIF orientation 6 (portrait shots, as phones
  store them), so the decoder's orientation step is in the measurement;
- ``heic``, ``avif``: the same 12 MP phone photos as an iPhone stores them, HEIC (HEVC, quality
  :data:`HEIF_QUALITY`, Apple's 512-pixel grid tiles, the portrait ones stored sideways with an
  ``irot`` rotation and the Exif orientation kept), and as AVIF (AV1, the same quality, ``irot``);
  encoded once in the ``heif-encode`` environment (devtools/heif_encode.py, cached under .build);
- ``mix``: 20 % thumbnails, 60 % web photos, 20 % phone photos (by request);
- ``text``: photos with text, for a text reading pipeline: the installed photos that have some (a
  scanned page, a name badge, brands on a tank and a cup, a clock face) and web photos with 2, 5 or
  10 lines of words drawn on them, longer side 640 and 1024 px.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

import cv2
import numpy as np

from builders import photos
from vision_serving import image_codec

# Colour and grey photographs (no synthetic textures), varied aspect ratios.
PHOTO_NAMES = ("astronaut", "camera", "chelsea", "coffee", "coins", "motorcycle_left", "rocket", "retina")
SIZES = (320, 640, 1024)  # longer side, pixels
JPEG_QUALITY = 90
THUMBNAIL_SIZES = (150,)
WEB_SIZES = (640, 1024, 1280)
PHONE_SIZE = (4000, 3000)  # width, height as stored (landscape sensor)
PHONE_NOISE_SIGMA = 6.5  # grey levels: sensor-like noise, so 12 MP compresses to 2.5-4 MB at quality 90
PHONE_ROTATED_ORIENTATION = 6  # EXIF: rotate 90 degrees clockwise to display (a portrait shot)
MIX_SHARES = {"thumbnail": 0.2, "web": 0.6, "phone": 0.2}
MIXES = ("web", "thumbnail", "phone", "heic", "avif", "mix", "text")
# HEIC/AVIF phone photos: quality 50 gives about 2 MB 12 MP HEICs, as iPhones write (80: 8.5 MB); Apple's grid tiles.
HEIF_QUALITY = 50
HEIC_TILE_SIZE = 512
AVIF_SPEED = 8  # libaom's encoder speed (0-10): the files are made once, the decoder is what is measured
TEXT_PHOTOS = ("page", "grace_hopper", "motorcycle_left", "motorcycle_right", "coffee", "camera", "china")
TEXT_BACKGROUNDS = ("astronaut", "chelsea", "rocket", "coins")
TEXT_LINES = (2, 5, 10)
WORDS = ("TOTAL 12.40", "Receipt 0042", "Milk 1.29", "Bread", "Thank you", "Station Road 7", "EXIT", "Open 9-17", "Platform 4", "Museum")
DEFAULT_MIX = "web"


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
    kinds = [_kind(p) for p in payloads]
    return {
        "count": len(payloads),
        "format": ", ".join(sorted({_format(p) for p in payloads})),
        "shares": {kind: round(kinds.count(kind) / len(kinds), 3) for kind in sorted(set(kinds))},
        "exif_rotated": sum(1 for p in payloads if "exif" in p.name),
        "irot_rotated": sum(1 for p in payloads if "irot" in p.name),
        "photos": sorted({p.name.split("@")[0] for p in payloads}),
        "longer_sides": sorted({max(p.width, p.height) for p in payloads}),
        "bytes_min": min(sizes),
        "bytes_mean": round(sum(sizes) / len(sizes)),
        "bytes_max": max(sizes),
    }


def exif_orientation_segment(orientation: int) -> bytes:
    """An Exif APP1 segment holding only IFD0's Orientation tag (0x0112, SHORT)."""
    tiff = b"II*\x00" + struct.pack("<I", 8) + struct.pack("<H", 1) + struct.pack("<HHIHH", 0x0112, 3, 1, orientation, 0)
    tiff += struct.pack("<I", 0)
    payload = b"Exif\x00\x00" + tiff
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def with_exif_orientation(jpeg: bytes, orientation: int) -> bytes:
    """``jpeg`` with an Exif orientation segment right after its start-of-image marker."""
    if not jpeg.startswith(b"\xff\xd8"):
        raise ValueError("not a JPEG")
    return jpeg[:2] + exif_orientation_segment(orientation) + jpeg[2:]


def phone_photo(image: np.ndarray, seed: int, rotated: bool = False) -> bytes:
    """A 12 MP phone-like JPEG from a (smaller) BGR photo: 4:3 centre crop, bicubic upscale, mild noise.

    ``rotated``: stored sideways (the photo turned 90 degrees counter-clockwise) with EXIF
    orientation 6, so that it displays upright, as a phone stores a portrait shot.
    """
    large = phone_pixels(image, seed, rotated)
    ok, encoded = cv2.imencode(".jpg", large, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise RuntimeError("OpenCV could not encode a phone photo as JPEG")
    data = encoded.tobytes()
    return with_exif_orientation(data, PHONE_ROTATED_ORIENTATION) if rotated else data


def phone_pixels(image: np.ndarray, seed: int, rotated: bool = False) -> np.ndarray:
    """The stored BGR pixels of :func:`phone_photo` (sideways when ``rotated``)."""
    width, height = PHONE_SIZE
    if rotated:
        width, height = height, width  # the displayed photo is portrait
    if image.ndim == 2:
        image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    rows, cols = image.shape[:2]
    aspect = width / height
    if cols / rows > aspect:  # too wide: crop the sides
        keep = round(rows * aspect)
        image = image[:, (cols - keep) // 2 : (cols - keep) // 2 + keep]
    else:
        keep = round(cols / aspect)
        image = image[(rows - keep) // 2 : (rows - keep) // 2 + keep]
    large = cv2.resize(image, (width, height), interpolation=cv2.INTER_CUBIC)
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(size=large.shape, dtype=np.float32) * PHONE_NOISE_SIGMA
    large = np.clip(large.astype(np.float32) + noise, 0, 255).astype(np.uint8)
    if rotated:
        large = cv2.rotate(large, cv2.ROTATE_90_COUNTERCLOCKWISE)  # stored landscape; orientation 6 turns it back
    return large


@functools.cache
def phone_payloads(names: tuple[str, ...] = PHOTO_NAMES, noise_draw: int = 0) -> tuple[Payload, ...]:
    """One 12 MP phone JPEG per photo; every other one stored sideways with EXIF orientation 6. ``noise_draw``:
    another draw of the sensor-like noise (the same photos, as a second shot of the same scene would differ)."""
    available = photos.registry()
    names = tuple(name for name in names if name in available)
    payloads = []
    for index, name in enumerate(names):
        rotated = index % 2 == 1
        seed = index + 1000 * noise_draw
        data = phone_photo(cv2.imread(str(available[name]), cv2.IMREAD_COLOR), seed=seed, rotated=rotated)
        width, height = PHONE_SIZE[::-1] if rotated else PHONE_SIZE  # as displayed
        payloads.append(Payload(f"{name}@12MP{'/exif6' if rotated else ''}", width, height, data))
    return tuple(payloads)


@functools.cache
def heif_payloads(image_format: str, names: tuple[str, ...] = PHOTO_NAMES) -> tuple[Payload, ...]:
    """:func:`phone_payloads`' photos as HEIC or AVIF: the same stored pixels, the rotated ones with irot
    (orientation 6) instead of an Exif segment."""
    from devtools import heif_encode

    available = photos.registry()
    names = tuple(name for name in names if name in available)
    stored, specs, payloads = {}, [], []
    for index, name in enumerate(names):
        rotated = index % 2 == 1
        pixels = phone_pixels(cv2.imread(str(available[name]), cv2.IMREAD_COLOR), seed=index, rotated=rotated)
        stored[name] = np.ascontiguousarray(pixels[..., ::-1])  # RGB
        spec = {"name": name, "format": image_format, "image": name, "quality": HEIF_QUALITY}
        spec |= {"tile_size": HEIC_TILE_SIZE} if image_format == "heic" else {"speed": AVIF_SPEED}
        if rotated:
            spec["orientation"] = PHONE_ROTATED_ORIENTATION
        specs.append(spec)
    encoded = heif_encode.encode(specs, stored)
    for index, name in enumerate(names):
        rotated = index % 2 == 1
        width, height = PHONE_SIZE[::-1] if rotated else PHONE_SIZE  # as displayed
        payloads.append(Payload(f"{name}@12MP.{image_format}{'/irot' if rotated else ''}", width, height, encoded[name]))
    return tuple(payloads)


def _scaled(image: np.ndarray, longer: int) -> np.ndarray:
    height, width = image.shape[:2]
    scale = longer / max(height, width)
    return cv2.resize(image, (round(width * scale), round(height * scale)), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC)


def _jpeg(name: str, image: np.ndarray) -> Payload:
    ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise RuntimeError(f"cannot encode {name}")
    return Payload(name, image.shape[1], image.shape[0], encoded.tobytes())


def with_lines(image: np.ndarray, count: int) -> np.ndarray:
    """``count`` lines of words drawn on light bands across the image, top to bottom."""
    out = image.copy()
    height, width = out.shape[:2]
    band = height // (count + 1)
    scale = min(1.2, band / 36)
    for index in range(count):
        y = band // 2 + index * band
        cv2.rectangle(out, (10, y), (min(width - 10, 10 + int(330 * scale)), y + int(30 * scale)), (235, 235, 235), -1)
        text = WORDS[index % len(WORDS)]
        cv2.putText(out, text, (16, y + int(24 * scale)), cv2.FONT_HERSHEY_SIMPLEX, 0.8 * scale, (20, 20, 20), 2, cv2.LINE_AA)
    return out


@functools.cache
def text_payloads() -> tuple[Payload, ...]:
    """The ``text`` mix: the installed photos with text, and photos with lines drawn, at 640 and 1024 px."""
    available = photos.registry()
    payloads = []
    for longer in (640, 1024):
        for name in TEXT_PHOTOS:
            if name in available:
                payloads.append(_jpeg(f"{name}_{longer}", _scaled(cv2.imread(str(available[name]), cv2.IMREAD_COLOR), longer)))
        for index, name in enumerate(TEXT_BACKGROUNDS):
            if name in available:
                count = TEXT_LINES[index % len(TEXT_LINES)]
                image = with_lines(_scaled(cv2.imread(str(available[name]), cv2.IMREAD_COLOR), longer), count)
                payloads.append(_jpeg(f"{name}_{count}_lines_{longer}", image))
    if not payloads:
        raise RuntimeError("none of the text photos is installed (scikit-image provides them)")
    order = np.random.default_rng(0).permutation(len(payloads))
    return tuple(payloads[i] for i in order)


def upload_mix(mix: str) -> list[Payload]:
    """The request payloads of one scenario (``MIXES``), in a fixed, interleaved order."""
    if mix == "text":
        return list(text_payloads())
    if mix == "web":
        return jpeg_payloads(sizes=WEB_SIZES)
    if mix == "thumbnail":
        return jpeg_payloads(sizes=THUMBNAIL_SIZES)
    if mix == "phone":
        return list(phone_payloads())
    if mix in ("heic", "avif"):
        return list(heif_payloads(mix))
    if mix != "mix":
        raise ValueError(f"unknown upload mix {mix!r}; known: {', '.join(MIXES)}")
    parts = {"thumbnail": upload_mix("thumbnail"), "web": upload_mix("web"), "phone": upload_mix("phone")}
    # Repeat each part so that its share of requests is MIX_SHARES (8 photos: 8 / 24 / 8 = 20/60/20 %).
    unit = min(len(part) / MIX_SHARES[kind] for kind, part in parts.items())
    chosen = []
    for kind, part in parts.items():
        wanted = round(unit * MIX_SHARES[kind])
        chosen += [part[i % len(part)] for i in range(wanted)]
    order = np.random.default_rng(0).permutation(len(chosen))
    return [chosen[i] for i in order]


def _format(payload: Payload) -> str:
    heif_format = image_codec.sniff_format(payload.data[: image_codec.SNIFF_BYTES])
    if heif_format in ("heic", "avif"):
        return f"{heif_format.upper()} quality {HEIF_QUALITY}"
    return f"JPEG quality {JPEG_QUALITY}"


def _kind(payload: Payload) -> str:
    longer = max(payload.width, payload.height)
    if longer >= max(PHONE_SIZE):
        return "phone"
    return "thumbnail" if longer <= max(THUMBNAIL_SIZES) else "web"
