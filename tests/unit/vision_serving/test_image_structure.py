"""The structural checks of PNG chunks, JPEG segments and WebP chunks (vision_serving/image_structure.py),
through ``image_codec.check`` and ``decode``: each lie is refused before any decoder runs, named; valid
files of many encoders pass and decode as the decoders decode them."""

from __future__ import annotations

import io
import struct
import zlib

import cv2
import numpy as np
import pytest
from PIL import Image

from tests.support import upload_seeds
from vision_serving import image_structure
from vision_serving.image_codec import ImageError, ImageLimits, check, decode, decode_rgb

LIMITS = ImageLimits(max_bytes=20 * 2**20, max_pixels=50_000_000, accepted_formats=("jpeg", "png", "webp"))


def photo(width: int = 320, height: int = 240) -> np.ndarray:
    """A smooth colour image with detail (compresses like a photo, not like noise)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    image = np.stack([128 + 100 * np.sin(x / 13), 128 + 100 * np.cos(y / 9), 128 + 60 * np.sin((x + y) / 21)], axis=2)
    return image.clip(0, 255).astype(np.uint8)


def encode(array: np.ndarray, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, fmt, **options)
    return buffer.getvalue()


def opencv_png(array: np.ndarray) -> bytes:
    return cv2.imencode(".png", cv2.cvtColor(array, cv2.COLOR_RGB2BGR))[1].tobytes()


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_of(ihdr: bytes, *chunks: bytes) -> bytes:
    return image_structure.PNG_SIGNATURE + png_chunk(b"IHDR", ihdr) + b"".join(chunks) + png_chunk(b"IEND", b"")


def patched(data: bytes, position: int, value: bytes) -> bytes:
    return data[:position] + value + data[position + len(value) :]


def refused(data: bytes, limits: ImageLimits = LIMITS) -> str:
    with pytest.raises(ImageError) as raised:
        check(data, limits)
    return str(raised.value)


# --------------------------------------------------------------------------- valid files


@pytest.mark.parametrize("name", sorted(upload_seeds.ENCODED))
def test_every_encoders_file_passes_and_decodes_as_opencv_or_pillow_decodes_it(name):
    """The seeds' encoders and options (Pillow, OpenCV, simplejpeg; progressive, restart markers, CMYK, palette,
    16-bit, interlaced, lossless, alpha, Exif and ICC chunks): every file passes and decodes as before."""
    data = upload_seeds.ENCODED[name]()
    checked = check(data, LIMITS)
    decoded = decode(data, LIMITS).image
    assert (decoded.shape[1], decoded.shape[0]) in ((checked.width, checked.height), (checked.height, checked.width))
    reference = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if reference is not None and checked.format != "jpeg":  # JPEG: simplejpeg's own decode (the codec tests compare it)
        assert np.array_equal(decoded, cv2.cvtColor(reference, cv2.COLOR_BGR2RGB)), name


def test_interlaced_png_sizes_are_adam7s():
    image = photo(37, 23)
    data = upload_seeds.adam7_png(image)
    assert np.array_equal(decode_rgb(data, LIMITS), image)
    assert image_structure.png_filtered_size(37, 23, 8, 2, interlaced=False) == (23 * (1 + 37 * 3), 23)
    size, rows = image_structure.png_filtered_size(37, 23, 8, 2, interlaced=True)
    assert size == len(zlib.decompress(b"".join(_idat_payloads(data)))) and rows == 3 + 3 + 3 + 6 + 6 + 12 + 11


def _idat_payloads(data: bytes) -> list[bytes]:
    position, found = 8, []
    while position < len(data):
        (length,) = struct.unpack_from(">I", data, position)
        if data[position + 4 : position + 8] == b"IDAT":
            found.append(data[position + 8 : position + 8 + length])
        position += 12 + length
    return found


def test_trailing_bytes_after_iend_are_ignored():
    data = opencv_png(photo())
    assert check(data + b"\x00" * 10_000, LIMITS).end == len(data)


# --------------------------------------------------------------------------- PNG


def test_png_chunk_length_past_the_payload_is_named():
    """The upload the served fuzzing found: OpenCV spent about a second of CPU on each before refusing it."""
    data = opencv_png(photo())
    assert data[37:41] == b"IDAT"
    lie = patched(data, 33, struct.pack(">I", 0x7FFFFFFF))
    assert refused(lie) == f"corrupt PNG: chunk IDAT at byte 33 declares 2147483647 bytes, the payload has {len(data) - 41} left"
    cut = data[: len(data) // 2]
    assert refused(cut).startswith("truncated PNG: chunk IDAT at byte ")  # a length an upload could have: cut
    assert refused(patched(data, 33, struct.pack(">I", 2**31 + 7))).endswith("over PNG's limit of 2^31 - 1")


def test_png_ihdr_must_be_first_and_13_bytes():
    data = opencv_png(photo())
    assert (
        refused(patched(data, 8, struct.pack(">I", 2_436_008_941)))
        == "corrupt PNG: chunk IHDR at byte 8 declares 2436008941 bytes (IHDR has 13)"
    )
    assert refused(data[:30]) == "truncated PNG: the payload ends inside the IHDR chunk, at byte 30"
    ihdr = struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0)
    second = png_of(ihdr, png_chunk(b"IHDR", ihdr), png_chunk(b"IDAT", zlib.compress(bytes(4 * 13))))
    assert refused(second) == "corrupt PNG: a second IHDR chunk at byte 33"


@pytest.mark.parametrize(
    "fields, message",
    [
        ((8, 5, 0, 0, 0), "bit depth 8 for colour type 5"),
        ((4, 2, 0, 0, 0), "bit depth 4 for colour type 2"),
        ((8, 2, 1, 0, 0), "compression 1, filter 0, interlace 0"),
        ((8, 2, 0, 0, 2), "compression 0, filter 0, interlace 2"),
    ],
)
def test_png_header_fields(fields, message):
    data = png_of(struct.pack(">II", 4, 4) + bytes(fields), png_chunk(b"IDAT", zlib.compress(bytes(52))))
    assert refused(data) == f"corrupt PNG: IHDR declares {message}"


def test_png_chunk_types_counts_and_end():
    ihdr = struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0)
    idat = png_chunk(b"IDAT", zlib.compress(bytes(4 * 13)))
    assert (
        refused(png_of(ihdr, png_chunk(b"tE\x00t", b""), idat))
        == "corrupt PNG: the chunk at byte 33 has type b'tE\\x00t', not four letters"
    )
    assert refused(png_of(ihdr)) == "corrupt PNG: no IDAT chunk (no pixel data)"
    assert refused(png_of(ihdr, idat)[:-12]) == "truncated PNG: no IEND chunk (the payload ends after 2 chunks, at byte 57)"
    many = png_of(ihdr, *[png_chunk(b"tEXt", b"a\x00b")] * 20, idat)
    assert check(many, LIMITS).width == 4
    assert refused(many, ImageLimits(max_bytes=10**6, max_pixels=10**6, max_png_chunks=16)) == "corrupt PNG: more than 16 chunks"


def test_png_idat_against_the_declared_pixels():
    """A header edited to declare more pixels than the data can fill is refused before OpenCV decodes (and
    allocates) them; so is far more data than the pixels can need."""
    data = opencv_png(photo())
    bigger = patched(data, 16, struct.pack(">II", 8000, 5600))
    message = refused(bigger)
    assert (
        message.startswith("truncated PNG: ")
        and " bytes in its IDAT chunks, " in message
        and "too few to code the declared 8000x5600 image" in message
    )
    ihdr = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    bloated = png_of(ihdr, png_chunk(b"IDAT", zlib.compress(bytes(14)) + bytes(20_000)))
    assert refused(bloated) == "corrupt PNG: 20011 bytes in its IDAT chunks, more than a 2x2 image can need (4142)"
    stored = encode(photo(), "PNG", compress_level=0)  # deflate's stored blocks: the most a real encoder writes
    assert check(stored, LIMITS).width == 320


# --------------------------------------------------------------------------- JPEG


def marker_offset(data: bytes, marker: int) -> int:
    return data.index(bytes([0xFF, marker]))


def test_jpeg_segment_past_the_payload_and_junk_between_segments():
    data = encode(photo(), "JPEG", quality=90)
    dqt = marker_offset(data, 0xDB)
    lie = patched(data, dqt + 2, b"\xff\xf0")
    assert refused(lie) == f"truncated JPEG: segment DQT at byte {dqt} declares 65520 bytes, the payload has {len(data) - dqt - 2} left"
    junk = data[:dqt] + b"\x12\x34" + data[dqt:]
    assert refused(junk) == f"corrupt JPEG: expected a marker at byte {dqt}, found 0x12"


def test_jpeg_marker_order():
    data = encode(photo(), "JPEG", quality=90)
    sof, sos = marker_offset(data, 0xC0), marker_offset(data, 0xDA)
    frame = data[sof : sof + 2 + struct.unpack_from(">H", data, sof + 2)[0]]
    assert refused(data[:sos] + frame + data[sos:]) == f"corrupt JPEG: a second frame header (SOF0) at byte {sos}"
    assert refused(data[:sos] + b"\xff\xd9") == f"corrupt JPEG: end-of-image marker at byte {sos} before any scan"
    assert refused(data[:sos] + b"\xff\xd8" + data[sos:]) == f"corrupt JPEG: a second start-of-image marker at byte {sos}"
    assert refused(data[:sos] + b"\xff\xf3\x00\x04ab" + data[sos:]).startswith(f"corrupt JPEG: marker 0xF3 at byte {sos} is not one")
    hierarchical = patched(data, sof + 1, b"\xc5")
    assert refused(hierarchical) == "JPEG of hierarchical coding (SOF5) is not accepted"


def test_jpeg_frame_and_scan_header_lengths():
    data = encode(photo(), "JPEG", quality=90)
    sof, sos = marker_offset(data, 0xC0), marker_offset(data, 0xDA)
    assert refused(patched(data, sof + 9, b"\x02")) == f"corrupt JPEG: frame header at byte {sof} declares 2 components in 17 bytes"
    assert refused(patched(data, sof + 11, b"\x51")) == f"corrupt JPEG: frame header at byte {sof} declares a sampling factor outside 1..4"
    assert refused(patched(data, sos + 4, b"\x02")) == f"corrupt JPEG: scan header at byte {sos} declares 2 components in 12 bytes"


@pytest.mark.parametrize("progressive", [False, True])
def test_jpeg_scan_data_against_the_declared_pixels(progressive):
    """libjpeg decoded a whole 45-megapixel frame of zeros (385 ms) when a 200 KB photo's frame header was edited
    to declare that size; the scan cannot code so many blocks, and is refused first."""
    data = encode(photo(), "JPEG", quality=90, progressive=progressive)
    sof = marker_offset(data, 0xC2 if progressive else 0xC0)
    bigger = patched(data, sof + 5, struct.pack(">HH", 5600, 8000))
    message = refused(bigger)
    assert (
        message.startswith("truncated JPEG: ")
        and " bytes in its scan 1 at byte " in message
        and "too few to code the declared 8000x5600 image" in message
    )
    assert check(patched(data, sof + 5, struct.pack(">HH", 480, 640)), LIMITS).width == 640  # enough data: the decoder judges


def test_jpeg_scan_count_limit_is_checked_in_the_walk():
    data = encode(photo(64, 64), "JPEG", quality=90, progressive=True)
    with pytest.raises(ImageError, match="more than 2 scans"):
        check(data, ImageLimits(max_bytes=10**6, max_pixels=10**6, max_jpeg_scans=2))


# --------------------------------------------------------------------------- WebP


def webp(lossless: bool = False, **options) -> bytes:
    return encode(photo(), "WEBP", lossless=lossless, quality=80, **options)


def test_webp_riff_size():
    data = webp()
    assert (
        refused(data[:-100])
        == f"truncated WebP: the RIFF header at byte 0 declares {len(data) - 8} bytes, the payload has {len(data) - 108} left"
    )
    lie = patched(data, 4, struct.pack("<I", 0xFFFFFFF0))
    assert refused(lie).startswith("corrupt WebP: the RIFF header at byte 0 declares 4294967280 bytes")
    assert refused(patched(data, 4, struct.pack("<I", 6))) == "corrupt WebP: the RIFF header declares 6 bytes, less than one chunk"


def test_webp_chunks():
    data = webp()
    assert data[12:16] == b"VP8 "
    size = len(data) - 20
    assert refused(patched(data, 16, struct.pack("<I", size + 1000))) == (
        f"corrupt WebP: chunk b'VP8 ' at byte 12 declares {size + 1000} bytes, the RIFF container has {size} left"
    )
    tag = int.from_bytes(data[20:23], "little")
    partition = patched(data, 20, ((tag & 0x1F) | (0x7FFFF << 5)).to_bytes(3, "little"))
    assert refused(partition).startswith("corrupt WebP: the VP8 frame at byte 12 declares a first partition of 524287 bytes")
    assert refused(patched(data, 20, bytes([data[20] | 1]))) == "corrupt WebP: the VP8 frame at byte 12 is not a key frame"
    lossless = webp(lossless=True)
    assert refused(patched(lossless, 24, bytes([lossless[24] | 0x20]))) == "corrupt WebP: VP8L version 1 (only 0 exists)"


def test_extended_webp_canvas_must_be_what_its_image_codes():
    data = webp(exif=b"Exif\x00\x00" + bytes(64))  # Pillow writes VP8X, then the image, then EXIF
    assert data[12:16] == b"VP8X" and check(data, LIMITS).width == 320
    canvas = patched(data, 24, (3999).to_bytes(3, "little") + (2999).to_bytes(3, "little"))
    assert refused(canvas) == "corrupt WebP: the canvas is 4000x3000 (VP8X), its image chunk codes 320x240"
    assert refused(patched(data, 16, struct.pack("<I", 12))).startswith("corrupt WebP: chunk")


def test_a_thin_jpeg_is_probed_at_an_eighth_before_a_full_decode(monkeypatch):
    """A header edited to declare 8 times the pixels passes the 2-bit floor but holds 7 bits per block: the probe at
    1/8 scale refuses it (a full decode would decode every declared block first); a photo is never probed."""
    from vision_serving import image_codec

    data = encode(photo(), "JPEG", quality=90)
    sof = marker_offset(data, 0xC0)
    inflated = patched(data, sof + 5, struct.pack(">HH", 240 * 3, 320 * 3))
    assert check(inflated, LIMITS).thin and not check(data, LIMITS).thin
    calls = []
    real = image_codec.simplejpeg.decode_jpeg

    def recorded(payload, **options):
        calls.append((options["min_width"], options["min_height"]))
        return real(payload, **options)

    monkeypatch.setattr(image_codec.simplejpeg, "decode_jpeg", recorded)
    with pytest.raises(ImageError, match=r"corrupt JPEG: the decoder rejected the data \(premature end of data segment\)"):
        decode(inflated, LIMITS)
    assert calls == [(1, 1)]
    calls.clear()
    decode(data, LIMITS)
    assert calls == [(0, 0)]
