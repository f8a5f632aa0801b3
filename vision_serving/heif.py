"""HEIC (HEIF with HEVC) and AVIF (HEIF with AV1): the container checked without decoding, then decoded.

Both are ISO base media files: boxes, an ``ftyp`` box first whose brands name the format, and a
``meta`` box describing *items*. The photo is the **primary item** (``pitm``); an iPhone photo's
primary item is a ``grid`` of 512 x 512 HEVC tiles (``iref`` ``dimg``), with an Exif item, a
thumbnail, maybe a depth map or an HDR gain map (auxiliary items, ``auxl``). :func:`parse` walks
these boxes with every read bounds-checked and every count capped (no recursion, no decoder):

- the format from the brands (:func:`sniff`), ``heic`` or ``avif``;
- the primary item's size from its ``ispe`` property, as stored: the checks of
  :func:`vision_serving.image_codec.check` (pixels, sides) apply to it as to every format;
- each image the decoder will decode (the primary item, its tiles, its auxiliary images such as
  alpha, and theirs) is checked before decoding: a grid's tiles must cover the image with less than
  a tile of overhang and hold at most :data:`GRID_OVERHANG` more pixels than the pixel limit; every
  coded stream's own size, read from the HEVC sequence parameter set (``hvcC``) or the AV1
  sequence header (``av1C`` or the item's data), must not exceed its ``ispe`` (rounded up to a
  coding block): a container that declares 64 x 64 around a 16 000 x 16 000 stream is refused
  before any decoding (a decode bomb the pixel limit on ``ispe`` alone would let through);
- the byte ranges of those images' data (``iloc``) must lie inside the payload: a cut file is
  refused as truncated;
- animated AVIF (an image sequence, major brand ``avis``) is refused, as animated WebP is; so are
  primary items of other codings (JPEG in HEIF, uncompressed, overlays).

**Decoding.** HEIC: libheif with libde265 (the decode-only ``pi-heif`` wheel; LGPL-3.0 libraries
loaded dynamically, docs/pipelines.md). AVIF: libavif with dav1d (Pillow's AVIF plugin). Neither has
a DCT-scaled decode: the full image is decoded whatever the model's size. 10-bit and 12-bit images
become 8 bits, alpha is dropped, monochrome becomes RGB; only the primary image is decoded.

**Orientation.** HEIF's transformative properties ``irot`` (rotation) and ``imir`` (mirror) are
normative; the Exif orientation a HEIF file carries is informational (ISO/IEC 23008-12 and the AVIF
specification: readers apply ``irot``/``imir``, not Exif). An iPhone stores both, consistent, so
applying both would turn a portrait photo twice. libheif applies ``irot``/``imir`` (and ``clap``,
the clean aperture crop) itself; libavif leaves them to the application, and Pillow reports them
as an Exif orientation (1-8) that :func:`decode` returns for the caller to apply, exactly as it
applies a JPEG's. Either way the orientation is applied once, and a file's Exif orientation tag
is never applied on top.

Every failure is a :class:`HeifError` naming the problem (``vision_serving.image_codec`` turns it
into an ``ImageError``); nothing from the libraries escapes :func:`decode`.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import _pi_heif
import numpy as np
import pi_heif
from pi_heif.heif import BaseImage
from PIL import AvifImagePlugin

FORMATS = ("heic", "avif")
# Brands (ftyp major or compatible) that name a still image of each coding. HEIF's generic 'mif1' alone
# does not say the codec; 'hevc'/'msf1' without an image brand are HEVC image sequences.
HEIC_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis"})
AVIF_BRANDS = frozenset({b"avif", b"avis"})
AVIF_SEQUENCE = b"avis"
# What the coding of an image item must be, per format.
CODING = {"heic": b"hvc1", "avif": b"av01"}
GRID = b"grid"
# sniff() reads the ftyp box within this many leading bytes (drift's format feature passes as many).
SNIFF_BYTES = 256
# Caps on what the parser walks: real photos have a few dozen boxes and a few hundred items (an iPhone
# 48 MP photo: 192 tiles). libheif's default security limit is 1000 items; pillow-heif writes at most that.
MAX_BOXES = 1000
MAX_ITEMS = 1000
MAX_PROPERTIES = 4096
MAX_EXTENTS = 4096
# A grid's tiles may hold this fraction more pixels than the pixel limit: its last column and row overhang the
# image by less than a tile (Apple's 512-pixel tiles add 3 % to a 48 MP photo: 16 x 12 tiles for 8064 x 6048).
GRID_OVERHANG = 0.125
# A coded picture is the image rounded up to whole coding blocks (HEVC: 8 to 64 pixels; AV1 codes any size).
CODING_BLOCK = 64
# The auxiliary types of an alpha image (auxC): the decoders decode it with the primary image, so it is checked too.
ALPHA_TYPES = ("urn:mpeg:mpegB:cicp:systems:auxiliary:alpha", "urn:mpeg:hevc:2015:auxid:1")
_HVCC_HEADER = 22
_HEVC_SPS = 33
_OBU_SEQUENCE_HEADER = 1
_EXIF_ORIENTATION = 0x0112


class HeifError(ValueError):
    """The payload is not an acceptable HEIC/AVIF image; the message says why."""


@dataclass(frozen=True)
class Extent:
    offset: int
    length: int


@dataclass
class Item:
    id: int
    type: bytes
    hidden: bool = False
    construction_method: int = 0
    extents: list[Extent] = field(default_factory=list)
    properties: list[int] = field(default_factory=list)  # 1-based indices into ipco


@dataclass(frozen=True)
class Coded:
    """One image the decoder decodes: its item, stored size (ispe), coded size (a grid's: all its tiles) and tiles."""

    item: int
    width: int
    height: int
    coded_width: int
    coded_height: int
    tiles: tuple[int, ...] = ()


@dataclass(frozen=True)
class Header:
    """What :func:`parse` found: the format, the primary image's stored size and transforms."""

    format: str
    width: int  # ispe of the primary item: before irot
    height: int
    rotation: int  # irot: anticlockwise quarter turns (0-3)
    mirrored: bool  # imir present
    cropped: bool  # clap present: libheif crops to the clean aperture
    meta: _Meta = field(repr=False, compare=False)  # the parsed meta box, for check_images

    @property
    def displayed(self) -> tuple[int, int]:
        """(width, height) after the rotation (before any clean-aperture crop)."""
        return (self.height, self.width) if self.rotation % 2 else (self.width, self.height)


# --------------------------------------------------------------------------- boxes


@dataclass(frozen=True)
class Box:
    type: bytes
    start: int  # the payload, after the header
    end: int


def _u(data: bytes, position: int, size: int, end: int, what: str) -> int:
    """An unsigned big-endian integer of ``size`` bytes (0, 1, 2, 4 or 8) at ``position``, inside ``end``."""
    if position + size > end:
        raise HeifError(f"corrupt {what}: a field runs past its box")
    return int.from_bytes(data[position : position + size], "big")


def _boxes(data: bytes, start: int, end: int, what: str, top_level: bool = False) -> Iterator[Box]:
    """The boxes in ``data[start:end]``. A child box that does not fit its parent is corrupt; at the top level
    the walk stops there (the file is cut or has trailing bytes: the byte ranges the images need decide)."""
    position, count = start, 0
    while position < end:
        count += 1
        if count > MAX_BOXES:
            raise HeifError(f"corrupt {what}: more than {MAX_BOXES} boxes")
        if end - position < 8:
            if top_level:
                return
            raise HeifError(f"corrupt {what}: a box header runs past its parent")
        size, kind = struct.unpack_from(">I4s", data, position)
        header = 8
        if size == 1:
            if end - position < 16:
                if top_level:
                    return
                raise HeifError(f"corrupt {what}: a box header runs past its parent")
            (size,) = struct.unpack_from(">Q", data, position + 8)
            header = 16
        elif size == 0:  # to the end of the enclosing box (or file)
            size = end - position
        if size < header or position + size > end:
            if top_level:
                if size >= header:
                    yield Box(kind, position + header, position + size)  # cut: its ranges are checked later
                return
            raise HeifError(f"corrupt {what}: box {_name(kind)} of {size} bytes does not fit its parent")
        yield Box(kind, position + header, position + size)
        position += size


def _name(kind: bytes) -> str:
    return repr(kind.decode("latin-1"))


def _full_box(data: bytes, box: Box, what: str) -> tuple[int, int, int]:
    """(version, flags, payload start) of a FullBox."""
    word = _u(data, box.start, 4, box.end, what)
    return word >> 24, word & 0xFFFFFF, box.start + 4


# --------------------------------------------------------------------------- format


def brands(data: bytes) -> tuple[bytes, frozenset[bytes]] | None:
    """(major brand, all brands) of an ``ftyp`` box at the start of ``data``; None if there is none."""
    if len(data) < 16 or data[4:8] != b"ftyp":
        return None
    (size,) = struct.unpack_from(">I", data, 0)
    if size < 16:
        return None
    end = min(size, len(data), SNIFF_BYTES)
    compatible = {data[position : position + 4] for position in range(16, end - 3, 4)}
    return data[8:12], frozenset({data[8:12], *compatible})


def sniff(data: bytes) -> str | None:
    """``heic`` or ``avif`` from the brands of the ``ftyp`` box (AVIF first: an AVIF may also list HEIF's)."""
    found = brands(data)
    if found is None:
        return None
    _, names = found
    if names & AVIF_BRANDS:
        return "avif"
    if names & HEIC_BRANDS:
        return "heic"
    return None


# --------------------------------------------------------------------------- the meta box


@dataclass
class _Meta:
    primary: int | None = None
    items: dict[int, Item] = field(default_factory=dict)
    properties: list[Box] = field(default_factory=list)
    references: dict[bytes, dict[int, list[int]]] = field(default_factory=dict)  # type -> from -> [to]
    idat: Box | None = None
    handler: bytes | None = None


def _parse_meta(data: bytes, meta: Box, name: str) -> _Meta:
    what = f"{name} (meta box)"
    found = _Meta()
    seen: set[bytes] = set()
    _, _, start = _full_box(data, meta, what)
    for box in _boxes(data, start, meta.end, what):
        if box.type in seen and box.type in (b"hdlr", b"pitm", b"iinf", b"iloc", b"iref", b"iprp", b"idat"):
            raise HeifError(f"corrupt {name}: two {_name(box.type)} boxes")
        seen.add(box.type)
        if box.type == b"hdlr":
            found.handler = data[box.start + 8 : box.start + 12] if box.end - box.start >= 12 else None
        elif box.type == b"pitm":
            version, _, position = _full_box(data, box, what)
            found.primary = _u(data, position, 2 if version == 0 else 4, box.end, what)
        elif box.type == b"iinf":
            _parse_iinf(data, box, found, what)
        elif box.type == b"iloc":
            _parse_iloc(data, box, found, what)
        elif box.type == b"iref":
            _parse_iref(data, box, found, what)
        elif box.type == b"iprp":
            _parse_iprp(data, box, found, what)
        elif box.type == b"idat":
            found.idat = box
    return found


def _item(found: _Meta, item_id: int) -> Item:
    item = found.items.get(item_id)
    if item is None:
        if len(found.items) >= MAX_ITEMS:
            raise HeifError(f"HEIF file has more than {MAX_ITEMS} items")
        item = found.items[item_id] = Item(item_id, b"")
    return item


def _parse_iinf(data: bytes, box: Box, found: _Meta, what: str) -> None:
    version, _, position = _full_box(data, box, what)
    count_size = 2 if version == 0 else 4
    count = _u(data, position, count_size, box.end, what)
    if count > MAX_ITEMS:
        raise HeifError(f"HEIF file has {count} items, over the limit of {MAX_ITEMS}")
    for entry in _boxes(data, position + count_size, box.end, what):
        if entry.type != b"infe":
            continue
        infe_version, flags, start = _full_box(data, entry, what)
        if infe_version < 2:
            continue  # a legacy item entry without an item type: never an image
        id_size = 2 if infe_version == 2 else 4
        item_id = _u(data, start, id_size, entry.end, what)
        kind_at = start + id_size + 2  # after item_protection_index
        if kind_at + 4 > entry.end:
            raise HeifError(f"corrupt {what}: item entry too short")
        kind = data[kind_at : kind_at + 4]
        if not all(0x20 <= byte < 0x7F for byte in kind):
            raise HeifError(f"corrupt {what}: item {item_id}'s type {kind!r} is not a four-character code")
        item = _item(found, item_id)
        item.type, item.hidden = kind, bool(flags & 1)


def _parse_iloc(data: bytes, box: Box, found: _Meta, what: str) -> None:
    version, _, position = _full_box(data, box, what)
    if version > 2:
        raise HeifError(f"corrupt {what}: item locations version {version}")
    sizes = _u(data, position, 2, box.end, what)
    offset_size, length_size, base_size = sizes >> 12, (sizes >> 8) & 0xF, (sizes >> 4) & 0xF
    index_size = sizes & 0xF if version in (1, 2) else 0
    if any(size not in (0, 4, 8) for size in (offset_size, length_size, base_size, index_size)):
        raise HeifError(f"corrupt {what}: item location field sizes {sizes:04x}")
    position += 2
    count_size = 4 if version == 2 else 2
    count = _u(data, position, count_size, box.end, what)
    position += count_size
    if count > MAX_ITEMS:
        raise HeifError(f"HEIF file locates {count} items, over the limit of {MAX_ITEMS}")
    extents = 0
    for _ in range(count):
        id_size = 4 if version == 2 else 2
        item = _item(found, _u(data, position, id_size, box.end, what))
        position += id_size
        if version in (1, 2):
            item.construction_method = _u(data, position, 2, box.end, what) & 0xF
            position += 2
        position += 2  # data_reference_index
        base = _u(data, position, base_size, box.end, what)
        position += base_size
        extent_count = _u(data, position, 2, box.end, what)
        position += 2
        extents += extent_count
        if extents > MAX_EXTENTS:
            raise HeifError(f"HEIF file has more than {MAX_EXTENTS} data extents")
        item.extents = []
        for _ in range(extent_count):
            position += index_size
            offset = _u(data, position, offset_size, box.end, what)
            length = _u(data, position + offset_size, length_size, box.end, what)
            position += offset_size + length_size
            item.extents.append(Extent(base + offset, length))


def _parse_iref(data: bytes, box: Box, found: _Meta, what: str) -> None:
    version, _, position = _full_box(data, box, what)
    id_size = 2 if version == 0 else 4
    for reference in _boxes(data, position, box.end, what):
        at = reference.start
        source = _u(data, at, id_size, reference.end, what)
        count = _u(data, at + id_size, 2, reference.end, what)
        at += id_size + 2
        if at + count * id_size > reference.end:
            raise HeifError(f"corrupt {what}: item reference runs past its box")
        targets = [_u(data, at + index * id_size, id_size, reference.end, what) for index in range(count)]
        found.references.setdefault(reference.type, {}).setdefault(source, []).extend(targets)


def _parse_iprp(data: bytes, box: Box, found: _Meta, what: str) -> None:
    for child in _boxes(data, box.start, box.end, what):
        if child.type == b"ipco":
            for index, prop in enumerate(_boxes(data, child.start, child.end, what)):
                if index >= MAX_PROPERTIES:
                    raise HeifError(f"HEIF file has more than {MAX_PROPERTIES} item properties")
                found.properties.append(prop)
        elif child.type == b"ipma":
            version, flags, position = _full_box(data, child, what)
            count = _u(data, position, 4, child.end, what)
            position += 4
            if count > MAX_ITEMS:
                raise HeifError(f"HEIF file associates properties with {count} items, over the limit of {MAX_ITEMS}")
            id_size, index_size = (2 if version < 1 else 4), (2 if flags & 1 else 1)
            for _ in range(count):
                item = _item(found, _u(data, position, id_size, child.end, what))
                associations = _u(data, position + id_size, 1, child.end, what)
                position += id_size + 1
                mask = 0x7FFF if index_size == 2 else 0x7F
                for _ in range(associations):
                    index = _u(data, position, index_size, child.end, what) & mask
                    position += index_size
                    if index:
                        item.properties.append(index)


# --------------------------------------------------------------------------- properties


def _property(data: bytes, found: _Meta, item: Item, kind: bytes) -> Box | None:
    for index in item.properties:
        if index > len(found.properties):
            raise HeifError(f"corrupt HEIF: item {item.id} refers to property {index} of {len(found.properties)}")
        prop = found.properties[index - 1]
        if prop.type == kind:
            return prop
    return None


def _ispe(data: bytes, found: _Meta, item: Item, name: str) -> tuple[int, int]:
    prop = _property(data, found, item, b"ispe")
    if prop is None:
        raise HeifError(f"corrupt {name}: image item {item.id} has no size (ispe)")
    _, _, position = _full_box(data, prop, f"{name} (ispe)")
    return _u(data, position, 4, prop.end, name), _u(data, position + 4, 4, prop.end, name)


def _aux_type(data: bytes, found: _Meta, item: Item) -> str:
    prop = _property(data, found, item, b"auxC")
    if prop is None:
        return ""
    text = data[prop.start + 4 : prop.end]
    return text.split(b"\x00", 1)[0].decode("latin-1")


def _item_span(data: bytes, found: _Meta, item: Item, name: str) -> tuple[int, int]:
    """(start, end) of the bytes an item's extents may address: the file, or idat for construction method 1."""
    if item.construction_method == 1:
        if found.idat is None:
            raise HeifError(f"corrupt {name}: item {item.id} is in a missing idat box")
        return found.idat.start, found.idat.end
    if item.construction_method == 0:
        return 0, len(data)
    raise HeifError(f"{name} item {item.id} is built from other items' data (construction method {item.construction_method})")


def _check_extents(data: bytes, found: _Meta, item: Item, name: str) -> None:
    """Every byte range of the item lies inside the payload (or idat); else the file was cut."""
    base, end = _item_span(data, found, item, name)
    if not item.extents:
        raise HeifError(f"corrupt {name}: image item {item.id} has no data")
    for extent in item.extents:
        stop = base + extent.offset + extent.length
        if stop > end:
            where = "its idat box" if item.construction_method == 1 else "the payload"
            raise HeifError(f"truncated {name}: item {item.id}'s data ends at byte {stop}, after the {end - base} bytes of {where}")


def _item_bytes(data: bytes, found: _Meta, item: Item, limit: int, name: str) -> bytes:
    """The first ``limit`` bytes of an item's data (extents inside the payload: :func:`_check_extents`)."""
    _check_extents(data, found, item, name)
    base, end = _item_span(data, found, item, name)
    chunks, wanted = [], limit
    for extent in item.extents:
        start = base + extent.offset
        length = extent.length or end - start  # 0: to the end
        chunks.append(data[start : start + min(length, wanted)])
        wanted -= min(length, wanted)
        if not wanted:
            break
    return b"".join(chunks)


# --------------------------------------------------------------------------- coded sizes


class _Bits:
    """A big-endian bit reader over a few dozen bytes (a parameter set or sequence header)."""

    def __init__(self, data: bytes, what: str) -> None:
        self.value, self.left, self.what = int.from_bytes(data, "big"), 8 * len(data), what

    def read(self, count: int) -> int:
        if count > self.left:
            raise HeifError(f"corrupt {self.what}: it ends early")
        self.left -= count
        return (self.value >> self.left) & ((1 << count) - 1)

    def leading_zeros(self, most: int) -> int:
        zeros = 0
        while not self.read(1):
            zeros += 1
            if zeros > most:
                raise HeifError(f"corrupt {self.what}: a variable-length number is too long")
        return zeros

    def ue(self) -> int:
        """Exp-Golomb ue(v) (HEVC)."""
        zeros = self.leading_zeros(31)
        return (1 << zeros) - 1 + self.read(zeros)

    def uvlc(self) -> int:
        """AV1's uvlc()."""
        zeros = self.leading_zeros(32)
        return (1 << 32) - 1 if zeros >= 32 else (1 << zeros) - 1 + self.read(zeros)


def hevc_coded_size(hvcc: bytes) -> tuple[int, int]:
    """(pic_width_in_luma_samples, pic_height_in_luma_samples) of the first SPS of an ``hvcC`` box's payload."""
    what = "HEIC (HEVC configuration)"
    if len(hvcc) < _HVCC_HEADER + 1:
        raise HeifError(f"corrupt {what}: too short")
    position, arrays = _HVCC_HEADER + 1, hvcc[_HVCC_HEADER]
    for _ in range(arrays):
        nal_type = _u(hvcc, position, 1, len(hvcc), what) & 0x3F
        count = _u(hvcc, position + 1, 2, len(hvcc), what)
        position += 3
        for _ in range(count):
            length = _u(hvcc, position, 2, len(hvcc), what)
            nal = hvcc[position + 2 : position + 2 + length]
            position += 2 + length
            if nal_type == _HEVC_SPS:
                return _hevc_sps_size(nal[2:258].replace(b"\x00\x00\x03", b"\x00\x00"))
    raise HeifError(f"corrupt {what}: no sequence parameter set")


def _hevc_sps_size(rbsp: bytes) -> tuple[int, int]:
    bits = _Bits(rbsp, "HEIC (HEVC sequence parameter set)")
    bits.read(4)  # sps_video_parameter_set_id
    sub_layers = bits.read(3)  # sps_max_sub_layers_minus1
    bits.read(1)
    bits.read(96)  # general profile, tier, flags and level
    present = [(bits.read(1), bits.read(1)) for _ in range(sub_layers)]
    if sub_layers:
        bits.read(2 * (8 - sub_layers))
    for profile, level in present:
        bits.read(88 * profile + 8 * level)
    bits.ue()  # sps_seq_parameter_set_id
    if bits.ue() == 3:  # chroma_format_idc 4:4:4
        bits.read(1)  # separate_colour_plane_flag
    return bits.ue(), bits.ue()


def av1_coded_size(obus: bytes) -> tuple[int, int] | None:
    """(max_frame_width, max_frame_height) of the first sequence header OBU in ``obus``; None if there is none."""
    what = "AVIF (AV1 OBUs)"
    position, count = 0, 0
    while position < len(obus) and count < 64:
        count += 1
        header = obus[position]
        kind, extension, has_size = (header >> 3) & 0xF, header & 0x4, header & 0x2
        position += 2 if extension else 1
        if has_size:
            size, shift = 0, 0
            while True:
                byte = _u(obus, position, 1, len(obus), what)
                position += 1
                size |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
                if shift >= 56:
                    raise HeifError(f"corrupt {what}: an OBU size is too long")
        else:
            size = len(obus) - position
        if kind == _OBU_SEQUENCE_HEADER:
            return _av1_sequence_size(obus[position : position + min(size, 256)])
        position += size
    return None


def _av1_sequence_size(header: bytes) -> tuple[int, int]:
    bits = _Bits(header, "AVIF (AV1 sequence header)")
    bits.read(4)  # seq_profile, still_picture
    if bits.read(1):  # reduced_still_picture_header
        bits.read(5)  # seq_level_idx[0]
    else:
        buffer_delay_bits, decoder_model = 0, False
        if bits.read(1):  # timing_info_present_flag
            bits.read(64)  # num_units_in_display_tick, time_scale
            if bits.read(1):  # equal_picture_interval
                bits.uvlc()
            decoder_model = bool(bits.read(1))
            if decoder_model:
                buffer_delay_bits = bits.read(5) + 1
                bits.read(32 + 5 + 5)
        initial_display_delay = bits.read(1)
        for _ in range(bits.read(5) + 1):  # operating points
            bits.read(12)  # operating_point_idc
            if bits.read(5) > 7:  # seq_level_idx
                bits.read(1)  # seq_tier
            if decoder_model and bits.read(1):
                bits.read(2 * buffer_delay_bits + 1)
            if initial_display_delay and bits.read(1):
                bits.read(4)
    width_bits, height_bits = bits.read(4) + 1, bits.read(4) + 1
    return bits.read(width_bits) + 1, bits.read(height_bits) + 1


def _coded_size(data: bytes, found: _Meta, item: Item, name: str) -> tuple[int, int]:
    """The size the item's coded stream says, read from its decoder configuration (or, for AV1, its data)."""
    if item.type == b"hvc1":
        config = _property(data, found, item, b"hvcC")
        if config is None:
            raise HeifError(f"corrupt {name}: HEVC item {item.id} has no decoder configuration (hvcC)")
        return hevc_coded_size(data[config.start : config.end])
    config = _property(data, found, item, b"av1C")
    if config is None:
        raise HeifError(f"corrupt {name}: AV1 item {item.id} has no decoder configuration (av1C)")
    size = av1_coded_size(data[config.start + 4 : config.end]) or av1_coded_size(_item_bytes(data, found, item, 4096, name))
    if size is None:
        raise HeifError(f"corrupt {name}: AV1 item {item.id} has no sequence header")
    return size


def _round_up(value: int) -> int:
    return -(-value // CODING_BLOCK) * CODING_BLOCK


# --------------------------------------------------------------------------- the whole header


def parse(data: bytes, image_format: str) -> Header:
    """The container of a HEIC or AVIF payload: its primary image's coding, stored size and transforms (see the
    module docstring); raises :class:`HeifError`. The caller checks that size against its limits, then calls
    :func:`check_images` before decoding."""
    name = image_format.upper()
    found_brands = brands(data)
    if found_brands is not None and found_brands[0] == AVIF_SEQUENCE:
        raise HeifError("animated AVIF (an image sequence) is not accepted")
    meta = None
    for box in _boxes(data, 0, len(data), name, top_level=True):
        if box.type == b"meta":
            if meta is not None:
                raise HeifError(f"corrupt {name}: two meta boxes")
            meta = box
    if meta is None:
        raise HeifError(f"corrupt {name}: no meta box (an image sequence without a still image, or a cut file)")
    if meta.end > len(data):
        raise HeifError(f"truncated {name}: its meta box ends at byte {meta.end}, after the payload's {len(data)} bytes")
    found = _parse_meta(data, meta, name)
    if found.handler != b"pict":
        raise HeifError(f"corrupt {name}: the meta box's handler is not 'pict'")
    if found.primary is None or found.primary not in found.items:
        raise HeifError(f"corrupt {name}: no primary image item")
    primary = found.items[found.primary]
    _check_coding(primary, image_format, "its primary image")
    width, height = _ispe(data, found, primary, name)
    rotation = _property(data, found, primary, b"irot")
    return Header(
        format=image_format,
        width=width,
        height=height,
        rotation=(data[rotation.start] & 3) if rotation is not None and rotation.end > rotation.start else 0,
        mirrored=_property(data, found, primary, b"imir") is not None,
        cropped=_property(data, found, primary, b"clap") is not None,
        meta=found,
    )


def check_images(data: bytes, header: Header, max_pixels: int, max_side: int) -> tuple[Coded, ...]:
    """The images the decoder will decode (the primary, then its alpha), each checked: tiles, coded sizes, byte
    ranges inside the payload (else truncated). ``max_pixels`` and ``max_side`` bound a grid's tiles and the alpha."""
    found, name = header.meta, header.format.upper()
    assert found.primary is not None
    primary = found.items[found.primary]
    images = [_image(data, found, primary, header.format, max_pixels, max_side, primary=True)]
    for source, targets in found.references.get(b"auxl", {}).items():
        item = found.items.get(source)
        if found.primary in targets and item is not None and _aux_type(data, found, item) in ALPHA_TYPES:
            images.append(_image(data, found, item, header.format, max_pixels, max_side, primary=False))
    for image in images:
        for item_id in (image.item, *image.tiles):
            _check_extents(data, found, found.items[item_id], name)
    return tuple(images)


def _check_coding(item: Item, image_format: str, what: str) -> None:
    if item.type not in (CODING[image_format], GRID):
        codings = {b"hvc1": "HEVC", b"av01": "AV1", b"jpeg": "JPEG", b"unci": "uncompressed", b"iovl": "an overlay", b"iden": "derived"}
        shown = codings.get(item.type, _name(item.type))
        name = image_format.upper()
        raise HeifError(f"{name} whose {what.removeprefix('its ')} is {shown} is not accepted (only {CODING_NAMES[name]} or a grid of it)")


def _image(data: bytes, found: _Meta, item: Item, image_format: str, max_pixels: int, max_side: int, primary: bool) -> Coded:
    what = "its primary image" if primary else f"its alpha image (item {item.id})"
    name, coding = image_format.upper(), CODING[image_format]
    _check_coding(item, image_format, what)
    width, height = _ispe(data, found, item, name)
    if width == 0 or height == 0:
        raise HeifError(f"corrupt {name}: declared size {width}x{height}")
    if not primary and (width * height > max_pixels or max(width, height) > max_side):
        raise HeifError(f"{name} declares {what} of {width}x{height}, over the limits")
    if item.type != GRID:
        coded_width, coded_height = _coded_size(data, found, item, name)
        _check_coded(name, item, width, height, coded_width, coded_height)
        return Coded(item.id, width, height, coded_width, coded_height)
    tiles = found.references.get(b"dimg", {}).get(item.id, [])
    descriptor = _item_bytes(data, found, item, 12, name)
    if len(descriptor) < 8 or descriptor[0] != 0:
        raise HeifError(f"corrupt {name}: bad grid descriptor of item {item.id}")
    rows, columns = descriptor[2] + 1, descriptor[3] + 1
    field_size = 4 if descriptor[1] & 1 else 2
    output = _u(descriptor, 4, field_size, len(descriptor), name), _u(descriptor, 4 + field_size, field_size, len(descriptor), name)
    if output != (width, height):
        raise HeifError(f"corrupt {name}: grid {item.id} is {output[0]}x{output[1]}, its ispe declares {width}x{height}")
    if len(tiles) != rows * columns:
        raise HeifError(f"corrupt {name}: grid {item.id} of {rows}x{columns} tiles refers to {len(tiles)} tiles")
    sizes = set()
    coded = 0
    for tile_id in tiles:
        tile = found.items.get(tile_id)
        if tile is None or tile.type != coding:
            raise HeifError(f"corrupt {name}: grid {item.id} has a tile that is not a {CODING_NAMES[name]} image")
        tile_width, tile_height = _ispe(data, found, tile, name)
        coded_width, coded_height = _coded_size(data, found, tile, name)
        _check_coded(name, tile, tile_width, tile_height, coded_width, coded_height)
        sizes.add((tile_width, tile_height))
        coded += coded_width * coded_height
    (tile_width, tile_height), *others = sizes
    if others:
        raise HeifError(f"corrupt {name}: grid {item.id} has tiles of different sizes")
    covers = (columns - 1) * tile_width < width <= columns * tile_width and (rows - 1) * tile_height < height <= rows * tile_height
    if not covers:
        raise HeifError(
            f"corrupt {name}: grid {item.id} of {columns}x{rows} tiles of {tile_width}x{tile_height} does not tile {width}x{height}"
        )
    if coded > max_pixels * (1 + GRID_OVERHANG):
        raise HeifError(f"{name} grid tiles hold {coded} pixels, over the limit of {max_pixels} pixels (and a tile of overhang)")
    return Coded(item.id, width, height, columns * tile_width, rows * tile_height, tuple(tiles))


CODING_NAMES = {"HEIC": "HEVC", "AVIF": "AV1"}


def _check_coded(name: str, item: Item, width: int, height: int, coded_width: int, coded_height: int) -> None:
    """The coded picture is the declared size, up to whole coding blocks: larger is a decode bomb (a small ispe
    around a huge stream), smaller a container that lies (decoders then fail, or, libavif, stretch the result)."""
    if not (width <= coded_width <= _round_up(width) and height <= coded_height <= _round_up(height)):
        raise HeifError(
            f"corrupt {name}: item {item.id} declares {width}x{height} (ispe), its {CODING_NAMES[name]} stream codes "
            f"{coded_width}x{coded_height}"
        )


# --------------------------------------------------------------------------- decoding


def set_threads(count: int) -> None:
    """Decoder threads per image (libheif's for a grid's tiles, dav1d's); 0: one per CPU this process may use."""
    if count <= 0:
        count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    pi_heif.options.DECODE_THREADS = count
    AvifImagePlugin.DEFAULT_MAX_THREADS = count


set_threads(1)


def decode(data: bytes, header: Header) -> tuple[np.ndarray, int]:
    """(8-bit RGB HxWx3 pixels, the orientation (1-8, Exif's numbering) still to apply to them).

    HEIC: libheif applies ``irot``/``imir``/``clap`` itself (orientation 1 is returned). AVIF: the pixels as
    stored and the orientation of its ``irot``/``imir`` (from Pillow: libavif's mapping).
    """
    name = header.format.upper()
    try:
        if header.format == "heic":
            pixels, orientation = _decode_heic(data, name), 1
        else:
            pixels, orientation = _decode_avif(data, name)
    except HeifError:
        raise
    except Exception as error:  # libheif/libavif errors, allocation failures: never past this point
        reason = str(error).strip().splitlines()[0][:100] if str(error).strip() else type(error).__name__
        raise HeifError(f"corrupt {name}: the decoder rejected the data ({reason})") from None
    return pixels, orientation


def _decode_heic(data: bytes, name: str) -> np.ndarray:
    """The primary image through pi-heif's image handles alone. Its HeifFile/HeifImage would also read every
    image's metadata, colour profile and auxiliary images, code the pixels do not need: a metadata item whose
    type is not UTF-8 crashes pi-heif 1.4.0 there (a segmentation fault, found by tests/unit/vision_serving/test_heif.py;
    :func:`parse` also refuses such item types)."""
    handles = _pi_heif.load_file(
        data,
        pi_heif.options.DECODE_THREADS,
        True,  # convert_hdr_to_8bit
        False,  # bgr_mode
        True,  # remove_stride
        True,  # hdr_to_16bit (monochrome above 8 bits: scaled to 16)
        "",  # preferred decoder: libde265, the only one
        False,  # keep libheif's security limits
    )
    primary = next((handle for handle in handles if handle is not None and handle.primary), None)
    if primary is None:
        raise HeifError(f"corrupt {name}: the decoder finds no primary image")
    image = BaseImage(primary)
    # The array views libheif's own buffer, freed with the handle: converted (or copied) while it is alive.
    pixels = _to_rgb8(np.asarray(image), name)
    return pixels if pixels.flags.owndata else pixels.copy()


def _decode_avif(data: bytes, name: str) -> tuple[np.ndarray, int]:
    # The plugin's class itself: Image.open would first ask it whether it accepts the major brand (avif, avis, mif1 or
    # msf1 only), refusing AVIFs whose major brand is an AV1 profile's (MA1B, MA1A) that sniff() accepts.
    with AvifImagePlugin.AvifImageFile(io.BytesIO(data)) as image:
        if getattr(image, "n_frames", 1) > 1:
            raise HeifError("animated AVIF (an image sequence) is not accepted")
        # Pillow sets the Exif orientation to the one irot/imir give (1 without them): the file's own Exif tag is not used.
        orientation = int(image.getexif().get(_EXIF_ORIENTATION, 1))
        image.load()
        return _to_rgb8(np.asarray(image), name), orientation if 1 <= orientation <= 8 else 1


def _to_rgb8(pixels: np.ndarray, name: str) -> np.ndarray:
    """Decoded pixels (8-bit RGB or RGBA; 8- or 16-bit grey) -> 8-bit RGB, alpha dropped."""
    if pixels.dtype == np.uint16:  # monochrome above 8 bits: pi-heif scales it to the 16-bit range
        pixels = (pixels >> 8).astype(np.uint8)
    if pixels.dtype != np.uint8:
        raise HeifError(f"corrupt {name}: decoded {pixels.dtype} pixels")
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    channels = pixels.shape[2]
    if channels in (1, 2):  # grey, grey + alpha
        return np.ascontiguousarray(np.repeat(pixels[..., :1], 3, axis=2))
    if channels in (3, 4):
        return np.ascontiguousarray(pixels[..., :3])
    raise HeifError(f"corrupt {name}: decoded {channels} channels")
