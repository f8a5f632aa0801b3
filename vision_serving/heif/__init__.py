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

from .container import FORMATS, SNIFF_BYTES, Coded, Header, HeifError, Item, brands, sniff
from .images import _decode_heic, check_images, decode, parse, set_threads

__all__ = [
    "FORMATS",
    "SNIFF_BYTES",
    "Coded",
    "Header",
    "HeifError",
    "Item",
    "_decode_heic",
    "brands",
    "check_images",
    "decode",
    "parse",
    "set_threads",
    "sniff",
]
