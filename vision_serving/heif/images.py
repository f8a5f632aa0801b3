"""The whole header: each image the decoder will decode checked against the limits, then the decode."""

from __future__ import annotations

import io
import os

import _pi_heif
import numpy as np
import pi_heif
from pi_heif.heif import BaseImage
from PIL import AvifImagePlugin

from .coded import _coded_size, _round_up
from .container import (
    _EXIF_ORIENTATION,
    ALPHA_TYPES,
    AVIF_SEQUENCE,
    CODING,
    GRID,
    GRID_OVERHANG,
    Coded,
    Header,
    HeifError,
    Item,
    _aux_type,
    _boxes,
    _check_extents,
    _ispe,
    _item_bytes,
    _Meta,
    _name,
    _parse_meta,
    _property,
    _u,
    brands,
)

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
