"""The HEIF container read without decoding: its boxes, its brands, its ``meta`` box and the items' properties."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

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
