"""PNG chunks, JPEG segments and WebP's RIFF chunks walked and checked before any decoder sees them.

What :mod:`vision_serving.heif` does for HEIC/AVIF boxes, done for the other formats: every length
field is compared with the payload, every count is capped, the order of the parts is one a decoder
accepts, and the coded data must be enough to fill the declared pixels. A decoder handed a length
that lies pays for it: OpenCV's PNG reader spent about a second of CPU on a 240 KB PNG whose IDAT
length had been set to 0x7FFFFFFF before refusing it; libjpeg decodes a whole 45-megapixel frame
of zeros when a 200 KB photo's frame header is edited to declare that size. Here such uploads are
refused in microseconds, each with a :class:`StructureError` naming the part that lies, e.g.
``corrupt PNG: chunk IDAT at byte 33 declares 2147483647 bytes, the payload has 220749 left``.

Two passes, so that the limits on declared pixels (checked by :func:`vision_serving.image_codec.check`
between them) come before the data bound:

- :func:`walk_png`, :func:`walk_jpeg`, :func:`walk_webp`: the structure, into a :class:`Layout`
  (declared size, where the image ends, what its coded data can fill);
- :func:`check_coded_data`: the coded data against the declared pixels.

**PNG.** The signature, then ``IHDR`` first with length 13 and a valid bit depth and colour type,
then chunks whose lengths (at most 2^31 - 1, the PNG limit) fit the payload, whose types are four
letters, at most ``max_chunks`` of them, up to ``IEND``; at least one ``IDAT``. The ``IDAT`` bytes
must lie between what deflate can squeeze the image's filtered rows into (1032:1, its best ratio:
2 bits per 258-byte match) and what storing them uncompressed takes (plus the overhead of stored
blocks and per-row flushes).

**JPEG.** From SOI, markers in an order libjpeg accepts: one frame header (SOF) whose length matches
its component count, before the first scan (SOS, whose length matches its own count); no reserved,
hierarchical or JPEG-extension markers; every segment's length inside the payload; at most
``max_scans`` scans and :data:`JPEG_MAX_SEGMENTS` segments; the image ends at the first EOI, after
at least one scan. Each Huffman-coded scan must hold at least the bits its blocks take at the least
(sequential: a DC and an end-of-block code per block, 2 bits; a progressive first DC scan: 1 bit);
arithmetic-coded and progressive refinement scans have no such floor.

**WebP.** The RIFF size inside the payload, chunks (at most :data:`WEBP_MAX_CHUNKS`) inside the RIFF
container, the first one ``VP8 ``, ``VP8L`` or ``VP8X`` (of 10 bytes); a VP8 frame's first
partition inside its chunk; in an extended file, exactly one image chunk, coding the canvas's size.

Cost: a loop iteration per chunk or segment and one C-speed search per JPEG scan; measured in
docs/design.md ("Structural checks").
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

# --------------------------------------------------------------------------- errors and results


class StructureError(ValueError):
    """The payload's structure lies (a length, a count, an order); the message names the part."""


@dataclass(frozen=True)
class Layout:
    """What a structural walk found: the declared size, where the image ends, and the coded data's shortfall."""

    width: int
    height: int
    end: int  # the image's bytes are data[:end]; anything after it is ignored
    # The coded data against the declared pixels (checked by check_coded_data, after the pixel limits).
    coded_bytes: int = 0  # PNG: IDAT bytes; JPEG: the bytes of its scan with the largest shortfall
    min_coded_bytes: int = 0  # the fewest bytes that can code the declared image (0: no floor)
    max_coded_bytes: int | None = None  # PNG: the most its IDAT chunks may hold
    coded_what: str = ""  # names the data in a message ("IDAT chunks", "scan 2 at byte 623")
    bits_per_block: float | None = None  # JPEG: all its scans' coded bits per 8x8 block of the frame


def check_coded_data(layout: Layout, name: str) -> None:
    """Refuse coded data that cannot fill the declared image (a truncated or edited file) or that is more than it can need."""
    size = f"{layout.width}x{layout.height}"
    if layout.coded_bytes < layout.min_coded_bytes:
        raise StructureError(
            f"truncated {name}: {layout.coded_bytes} bytes in its {layout.coded_what}, too few to code the declared {size} image "
            f"(at least {layout.min_coded_bytes})"
        )
    if layout.max_coded_bytes is not None and layout.coded_bytes > layout.max_coded_bytes:
        raise StructureError(
            f"corrupt {name}: {layout.coded_bytes} bytes in its {layout.coded_what}, more than a {size} image can need "
            f"({layout.max_coded_bytes})"
        )


def _past_end(name: str, what: str, position: int, declared: int, left: int, max_bytes: int) -> StructureError:
    """A part whose length runs past the payload: cut (a length an upload could have) or a lie (one no accepted upload can)."""
    kind = "truncated" if declared <= max_bytes else "corrupt"
    return StructureError(f"{kind} {name}: {what} at byte {position} declares {declared} bytes, the payload has {left} left")


# --------------------------------------------------------------------------- PNG

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Chunks a PNG may have. libpng writes IDAT chunks of 8 KB (OpenCV's PNGs: a 20 MB upload holds about
# 2,600), Pillow of 64 KB; every other chunk is one of a handful. Each costs the walk a loop iteration.
DEFAULT_MAX_PNG_CHUNKS = 8192
PNG_MAX_LENGTH = 2**31 - 1  # the PNG specification's limit on a chunk's length
# Colour type -> (samples per pixel, the bit depths it allows).
PNG_COLOR_TYPES = {0: (1, (1, 2, 4, 8, 16)), 2: (3, (8, 16)), 3: (1, (1, 2, 4, 8)), 4: (2, (8, 16)), 6: (4, (8, 16))}
# Deflate's best ratio: a 258-byte match in 2 bits (one-bit length and distance codes).
DEFLATE_MAX_RATIO = 1032
# Adam7: (first column, first row, column step, row step) of each pass.
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
_PNG_CHUNK = struct.Struct(">I4s")
_LETTERS = frozenset(range(0x41, 0x5B)) | frozenset(range(0x61, 0x7B))


def png_filtered_size(width: int, height: int, bit_depth: int, color_type: int, interlaced: bool) -> tuple[int, int]:
    """(bytes of the filtered rows the IDAT stream inflates to, how many rows) of a PNG of that header."""
    bits = PNG_COLOR_TYPES[color_type][0] * bit_depth
    passes = ADAM7 if interlaced else ((0, 0, 1, 1),)
    size = rows = 0
    for column, row, column_step, row_step in passes:
        pass_width, pass_height = -(-(width - column) // column_step), -(-(height - row) // row_step)
        if pass_width > 0 and pass_height > 0:
            size += pass_height * (1 + -(-pass_width * bits // 8))
            rows += pass_height
    return size, rows


def walk_png(data: bytes, max_bytes: int, max_chunks: int = DEFAULT_MAX_PNG_CHUNKS) -> Layout:
    """The chunks of a PNG (see the module docstring); raises :class:`StructureError`."""
    end = len(data)
    if end < 16 or data[12:16] != b"IHDR":
        raise StructureError("corrupt PNG: missing IHDR header")
    if end < 33:
        raise StructureError(f"truncated PNG: the payload ends inside the IHDR chunk, at byte {end}")
    (length,) = struct.unpack_from(">I", data, 8)
    if length != 13:
        raise StructureError(f"corrupt PNG: chunk IHDR at byte 8 declares {length} bytes (IHDR has 13)")
    width, height, bit_depth, color_type, compression, filtering, interlace = struct.unpack_from(">IIBBBBB", data, 16)
    if color_type not in PNG_COLOR_TYPES or bit_depth not in PNG_COLOR_TYPES[color_type][1]:
        raise StructureError(f"corrupt PNG: IHDR declares bit depth {bit_depth} for colour type {color_type}")
    if compression != 0 or filtering != 0 or interlace not in (0, 1):
        raise StructureError(f"corrupt PNG: IHDR declares compression {compression}, filter {filtering}, interlace {interlace}")
    position, chunks, idat = 33, 1, 0
    while True:
        if position + 8 > end:
            raise StructureError(f"truncated PNG: no IEND chunk (the payload ends after {chunks} chunks, at byte {end})")
        length, kind = _PNG_CHUNK.unpack_from(data, position)
        chunks += 1
        if chunks > max_chunks:
            raise StructureError(f"corrupt PNG: more than {max_chunks} chunks")
        if not (kind[0] in _LETTERS and kind[1] in _LETTERS and kind[2] in _LETTERS and kind[3] in _LETTERS):
            raise StructureError(f"corrupt PNG: the chunk at byte {position} has type {kind!r}, not four letters")
        if length > PNG_MAX_LENGTH:
            raise StructureError(
                f"corrupt PNG: chunk {kind.decode()} at byte {position} declares {length} bytes, over PNG's limit of 2^31 - 1"
            )
        if position + 12 + length > end:
            raise _past_end("PNG", f"chunk {kind.decode()}", position, length, end - position - 8, max_bytes)
        if kind == b"IDAT":
            idat += length
        elif kind == b"IEND":
            break
        elif kind == b"IHDR":
            raise StructureError(f"corrupt PNG: a second IHDR chunk at byte {position}")
        position += 12 + length
    if idat == 0:
        raise StructureError("corrupt PNG: no IDAT chunk (no pixel data)")
    filtered, rows = png_filtered_size(width, height, bit_depth, color_type, bool(interlace))
    # Stored (uncompressed) deflate blocks add 5 bytes per 64 KB, zlib 6; encoders that flush each row add a few bytes per row.
    most = filtered + filtered // 64 + 16 * rows + 4096
    return Layout(width, height, position + 12, idat, max(0, (filtered - 65536) // DEFLATE_MAX_RATIO), most, "IDAT chunks")


# --------------------------------------------------------------------------- JPEG

# Start-of-frame markers: SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC).
JPEG_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Frame types libjpeg refuses (hierarchical, differential): named here rather than handed to it.
JPEG_HIERARCHICAL = frozenset({0xC5, 0xC6, 0xC7, 0xCD, 0xCE, 0xCF})
JPEG_ARITHMETIC = frozenset({0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
JPEG_PROGRESSIVE = frozenset({0xC2, 0xCA})
JPEG_LOSSLESS = frozenset({0xC3, 0xCB})
# Markers without a length field: RST0-7, SOI, EOI and TEM.
JPEG_STANDALONE_MARKERS = frozenset(range(0xD0, 0xDA)) | {0x01}
# Length-bearing markers libjpeg reads or skips: DHT, DAC, DQT, DNL, DRI, APP0-15, COM (and the SOFs, SOS).
JPEG_TABLE_MARKERS = frozenset({0xC4, 0xCC, 0xDB, 0xDC, 0xDD, 0xFE}) | frozenset(range(0xE0, 0xF0))
JPEG_SOI, JPEG_EOI, JPEG_SOS = 0xD8, 0xD9, 0xDA
# Real JPEGs have a few dozen segments (a large ICC profile is split in 64 KB APP2 chunks); walking millions
# of tiny ones in Python would cost seconds.
JPEG_MAX_SEGMENTS = 1000
JPEG_MARKER_NAMES = {0xC4: "DHT", 0xCC: "DAC", 0xDA: "SOS", 0xDB: "DQT", 0xDC: "DNL", 0xDD: "DRI", 0xFE: "COM"}
# The end of entropy-coded data: 0xFF followed by anything but a stuffed zero, a restart marker (RST0-7) or a fill byte.
_JPEG_MARKER_AFTER_SCAN = re.compile(b"\xff[^\x00\xd0-\xd7\xff]")
# A marker: 0xFF, any number of 0xFF fill bytes, then the marker code.
_JPEG_MARKER = re.compile(b"\xff+([\x00-\xfe])")


def marker_name(marker: int) -> str:
    if marker in JPEG_SOF_MARKERS:
        return f"SOF{marker - 0xC0}"
    if 0xE0 <= marker <= 0xEF:
        return f"APP{marker - 0xE0}"
    return JPEG_MARKER_NAMES.get(marker, f"0x{marker:02X}")


def next_marker(data: bytes, position: int) -> tuple[int, int] | None:
    """(offset of the marker's 0xFF, marker code) at ``position``, past any fill bytes (one C-speed match).

    None if there is no 0xFF at ``position`` or only fill bytes follow it.
    """
    match = _JPEG_MARKER.match(data, position)
    if match is None:
        return None
    return match.start(1) - 1, match.group(1)[0]


@dataclass(frozen=True)
class _Frame:
    marker: int
    width: int
    height: int
    blocks: dict[int, int]  # component id -> its 8x8 blocks


def _frame(data: bytes, marker: int, position: int, length: int) -> _Frame:
    start = position + 4
    if length < 8:
        raise StructureError(f"corrupt JPEG: frame header {marker_name(marker)} at byte {position} of {length} bytes (at least 8)")
    height, width, count = struct.unpack_from(">HHB", data, start + 1)
    if count == 0 or length != 8 + 3 * count:
        raise StructureError(f"corrupt JPEG: frame header at byte {position} declares {count} components in {length} bytes")
    components = [struct.unpack_from(">BB", data, start + 6 + 3 * index) for index in range(count)]
    sampling = {ident: (factors >> 4, factors & 15) for ident, factors in components}
    if any(not (1 <= h <= 4 and 1 <= v <= 4) for h, v in sampling.values()):
        raise StructureError(f"corrupt JPEG: frame header at byte {position} declares a sampling factor outside 1..4")
    h_max, v_max = max(h for h, _ in sampling.values()), max(v for _, v in sampling.values())
    blocks = {ident: _ceil(_ceil(width * h, h_max), 8) * _ceil(_ceil(height * v, v_max), 8) for ident, (h, v) in sampling.items()}
    return _Frame(marker, width, height, blocks)


def _ceil(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def _scan_floor_bits(data: bytes, frame: _Frame, position: int, length: int) -> int:
    """The fewest bits the scan at ``position`` can code its blocks in (0 where there is no floor); checks its length."""
    start = position + 4
    (count,) = struct.unpack_from(">B", data, start) if length >= 3 else (0,)
    if not 1 <= count <= 4 or length != 6 + 2 * count:
        raise StructureError(f"corrupt JPEG: scan header at byte {position} declares {count} components in {length} bytes")
    if frame.marker in JPEG_ARITHMETIC or frame.marker in JPEG_LOSSLESS:
        return 0
    blocks = sum(frame.blocks.get(data[start + 1 + 2 * index], 0) for index in range(count))
    spectral_start, approximation = data[start + 1 + 2 * count], data[start + 3 + 2 * count]
    if frame.marker not in JPEG_PROGRESSIVE:
        return 2 * blocks  # a DC code and an end-of-block code (each at least a bit) per block
    return blocks if spectral_start == 0 and approximation >> 4 == 0 else 0  # a first DC scan: a bit per block


def walk_jpeg(data: bytes, max_scans: int) -> Layout:
    """The markers of a JPEG (see the module docstring); raises :class:`StructureError`."""
    position, end, segments, scans, coded_total = 2, len(data), 0, 0, 0
    frame: _Frame | None = None
    shortfall = (0, 0, 0, "")  # (bits missing, bytes held, bytes needed, which scan) of the scan worst off
    while True:
        if position < end and data[position] != 0xFF:
            raise StructureError(f"corrupt JPEG: expected a marker at byte {position}, found 0x{data[position]:02X}")
        found = next_marker(data, position)
        if found is None:  # the end, or fill bytes up to it
            if frame is None:
                raise StructureError("truncated JPEG: header ends before the frame size")
            raise StructureError(f"truncated JPEG: no end-of-image marker (the payload ends at byte {end})")
        position, marker = found
        segments += 1
        if segments > JPEG_MAX_SEGMENTS:
            raise StructureError(f"corrupt JPEG: more than {JPEG_MAX_SEGMENTS} segments")
        if marker == JPEG_EOI:
            if scans == 0:
                raise StructureError(f"corrupt JPEG: end-of-image marker at byte {position} before any scan")
            break
        if marker == JPEG_SOI:
            raise StructureError(f"corrupt JPEG: a second start-of-image marker at byte {position}")
        if marker in JPEG_STANDALONE_MARKERS:
            position += 2
            continue
        if marker not in JPEG_SOF_MARKERS and marker not in JPEG_TABLE_MARKERS and marker != JPEG_SOS:
            raise StructureError(f"corrupt JPEG: marker 0x{marker:02X} at byte {position} is not one a JPEG decoder reads")
        length = _segment_length(data, marker, position)
        if marker in JPEG_SOF_MARKERS:
            if frame is not None:
                raise StructureError(f"corrupt JPEG: a second frame header ({marker_name(marker)}) at byte {position}")
            if marker in JPEG_HIERARCHICAL:
                raise StructureError(f"JPEG of hierarchical coding ({marker_name(marker)}) is not accepted")
            frame = _frame(data, marker, position, length)
        elif marker == JPEG_SOS:
            if frame is None:
                raise StructureError("corrupt JPEG: no frame header before image data")
            scans += 1
            if scans > max_scans:
                raise StructureError(f"JPEG has more than {max_scans} scans (the limit); progressive images normally have at most a dozen")
            floor_bits = _scan_floor_bits(data, frame, position, length)
            header, position, coded = position, *_scan_data(data, position + 2 + length, scans, position)
            coded_total += coded
            if floor_bits - 8 * coded > shortfall[0]:
                shortfall = (floor_bits - 8 * coded, coded, -(-floor_bits // 8), f"scan {scans} at byte {header}")
            continue
        position += 2 + length
    assert frame is not None  # a scan needs a frame
    _, coded, needed, which = shortfall
    bits_per_block = 8 * coded_total / max(1, sum(frame.blocks.values()))
    return Layout(frame.width, frame.height, position + 2, coded, needed, None, which, bits_per_block)


def _segment_length(data: bytes, marker: int, position: int) -> int:
    """The length field of the segment at ``position``, checked: at least 2, and the segment inside the payload."""
    end = len(data)
    if position + 4 > end:
        raise StructureError(f"truncated JPEG: the payload ends inside the {marker_name(marker)} marker at byte {position}")
    (length,) = struct.unpack_from(">H", data, position + 2)
    if length < 2:
        raise StructureError(f"corrupt JPEG: bad segment length at byte {position}")
    if position + 2 + length > end:
        raise StructureError(
            f"truncated JPEG: segment {marker_name(marker)} at byte {position} declares {length} bytes, the payload has {end - position - 2} left"
        )
    return length


def _scan_data(data: bytes, start: int, scan: int, header: int) -> tuple[int, int]:
    """(where the marker after the entropy-coded data starting at ``start`` is, how many bytes that data holds)."""
    after_scan = _JPEG_MARKER_AFTER_SCAN.search(data, start)
    if after_scan is None:
        raise StructureError(f"truncated JPEG: no end-of-image marker (scan {scan} at byte {header} runs to the end)")
    return after_scan.start(), after_scan.start() - start


@dataclass(frozen=True)
class FrameHeader:
    """A JPEG's frame header (SOF): its coding (the marker), sample precision, size and component count."""

    marker: int
    precision: int
    width: int
    height: int
    components: int


def jpeg_frame_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a JPEG's frame header, walking only the segments before it (no scan, no data bound)."""
    header = jpeg_frame_header(data)
    return header.width, header.height


def jpeg_frame_header(data: bytes) -> FrameHeader:
    """A JPEG's frame header, walking only the segments before it (no scan, no data bound)."""
    position, end, segments = 2, len(data), 0
    while position + 4 <= end:
        found = next_marker(data, position)
        if found is None:
            if data[position] != 0xFF:
                raise StructureError(f"corrupt JPEG: expected a marker at byte {position}, found 0x{data[position]:02X}")
            break  # fill bytes up to the end
        position, marker = found
        segments += 1
        if segments > JPEG_MAX_SEGMENTS:
            raise StructureError(f"corrupt JPEG: more than {JPEG_MAX_SEGMENTS} segments before the frame header")
        if marker in JPEG_STANDALONE_MARKERS:
            position += 2
            continue
        if position + 10 > end:
            break
        (length,) = struct.unpack_from(">H", data, position + 2)
        if length < 2:
            raise StructureError(f"corrupt JPEG: bad segment length at byte {position}")
        if marker in JPEG_SOF_MARKERS:
            precision, height, width, components = struct.unpack_from(">BHHB", data, position + 4)
            return FrameHeader(marker, precision, width, height, components)
        if marker == JPEG_SOS:
            raise StructureError("corrupt JPEG: no frame header before image data")
        position += 2 + length
    raise StructureError("truncated JPEG: header ends before the frame size")


# --------------------------------------------------------------------------- WebP

# Chunks a still WebP may have: VP8X, ICCP, ALPH, the image, EXIF, XMP and a few unknown ones.
WEBP_MAX_CHUNKS = 64
_WEBP_IMAGE_CHUNKS = (b"VP8 ", b"VP8L")


def webp_frame_size(data: bytes, position: int, kind: bytes, size: int) -> tuple[int, int]:
    """(width, height) the VP8 or VP8L chunk at ``position`` codes; checks its frame header against the chunk."""
    start = position + 8
    if kind == b"VP8 ":
        if size < 10:
            raise StructureError(f"corrupt WebP: chunk VP8 at byte {position} of {size} bytes, shorter than a frame header")
        tag = int.from_bytes(data[start : start + 3], "little")
        if tag & 1:
            raise StructureError(f"corrupt WebP: the VP8 frame at byte {position} is not a key frame")
        if data[start + 3 : start + 6] != b"\x9d\x01\x2a":
            raise StructureError("corrupt WebP: bad VP8 frame start code")
        partition = (tag >> 5) & 0x7FFFF
        if partition > size - 10:
            raise StructureError(
                f"corrupt WebP: the VP8 frame at byte {position} declares a first partition of {partition} bytes, its chunk has {size - 10}"
            )
        width, height = struct.unpack_from("<HH", data, start + 6)
        return width & 0x3FFF, height & 0x3FFF
    if size < 5:
        raise StructureError(f"corrupt WebP: chunk VP8L at byte {position} of {size} bytes, shorter than its header")
    if data[start] != 0x2F:
        raise StructureError("corrupt WebP: bad VP8L signature")
    bits = int.from_bytes(data[start + 1 : start + 5], "little")
    if bits >> 29:
        raise StructureError(f"corrupt WebP: VP8L version {bits >> 29} (only 0 exists)")
    return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1


def walk_webp(data: bytes, max_bytes: int) -> Layout:
    """The RIFF container of a still WebP (see the module docstring); raises :class:`StructureError`."""
    if len(data) < 30:
        raise StructureError("truncated WebP: header ends before the frame size")
    (riff_size,) = struct.unpack_from("<I", data, 4)
    if riff_size < 4 + 8:
        raise StructureError(f"corrupt WebP: the RIFF header declares {riff_size} bytes, less than one chunk")
    riff_end = 8 + riff_size
    if riff_end > len(data):
        raise _past_end("WebP", "the RIFF header", 0, riff_size, len(data) - 8, max_bytes)
    position, chunks = 12, []
    while position + 8 <= riff_end:
        kind, size = data[position : position + 4], int.from_bytes(data[position + 4 : position + 8], "little")
        if position + 8 + size > riff_end:
            raise StructureError(
                f"corrupt WebP: chunk {kind!r} at byte {position} declares {size} bytes, the RIFF container has "
                f"{riff_end - position - 8} left"
            )
        chunks.append((position, kind, size))
        if len(chunks) > WEBP_MAX_CHUNKS:
            raise StructureError(f"corrupt WebP: more than {WEBP_MAX_CHUNKS} chunks")
        position += 8 + size + (size & 1)
    first_position, first, first_size = chunks[0]
    if first in _WEBP_IMAGE_CHUNKS:
        width, height = webp_frame_size(data, first_position, first, first_size)
        return Layout(width, height, riff_end)
    if first != b"VP8X":
        raise StructureError(f"corrupt WebP: unknown first chunk {first!r}")
    if first_size != 10:
        raise StructureError(f"corrupt WebP: chunk VP8X declares {first_size} bytes (VP8X has 10)")
    if data[20] & 0x02:
        raise StructureError("animated WebP is not accepted")
    width, height = int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    images = [(position, kind, size) for position, kind, size in chunks if kind in _WEBP_IMAGE_CHUNKS]
    if len(images) != 1:
        raise StructureError(f"corrupt WebP: an extended WebP with {len(images)} image chunks (VP8 or VP8L), not one")
    coded = webp_frame_size(data, *images[0])
    if coded != (width, height):
        raise StructureError(f"corrupt WebP: the canvas is {width}x{height} (VP8X), its image chunk codes {coded[0]}x{coded[1]}")
    return Layout(width, height, riff_end)
