"""HEIC and AVIF: the container checks before decoding, the decoders, orientation, bit depth, alpha, several images.

The files are made by real encoders in their own environment (tests/support/heif_files.py: pillow-heif with
x265, Pillow and imagecodecs with libavif/aom); the server's decoders are the decode-only ones of requirements/image.in.
"""

from __future__ import annotations

import struct
import zlib

import cv2
import numpy as np
import pi_heif
import pytest
from PIL import AvifImagePlugin, Image

from builders import photos
from tests.support import heif_files as heif_support
from vision_serving import drift, heif, image_codec, preprocessing
from vision_serving.image_codec import ImageError, ImageLimits

LIMITS = ImageLimits(max_bytes=20_000_000, max_pixels=50_000_000, accepted_formats=image_codec.FORMATS)
PHOTO = "chelsea"  # 451 x 300: an odd width, as phones never write but clients may
ORIENTATIONS = range(1, 9)
# Mean |difference| of 255 between a decoded file and the pixels encoded at quality 90 (measured: 0.6-1.6).
LOSSY = 3.0


def smooth(width: int, height: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(max(height // 60, 2), max(width // 60, 2), 3), dtype=np.uint8)
    return cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)


@pytest.fixture(scope="module")
def sources() -> dict[str, np.ndarray]:
    photo = image_codec.decode_rgb(photos.photo_bytes(PHOTO), LIMITS)
    return {
        "photo": photo,
        "rgba": np.dstack([photo, np.linspace(0, 255, photo.shape[1], dtype=np.uint8)[None, :].repeat(photo.shape[0], 0)]),
        "grey": np.ascontiguousarray(photo[..., 1]),
        "large": smooth(1100, 700),  # a grid of 3 x 2 tiles of 512
        "small_a": smooth(64, 48, seed=1),
        "small_b": smooth(96, 32, seed=2),
    }


SPECS = [
    {"name": "heic", "format": "heic", "image": "photo"},
    {"name": "heic_10bit", "format": "heic", "image": "photo", "bits": 10},
    {"name": "heic_alpha", "format": "heic", "image": "rgba"},
    {"name": "heic_grey", "format": "heic", "image": "grey"},
    {"name": "heic_grey_10bit", "format": "heic", "image": "grey", "bits": 10},
    {"name": "heic_grid", "format": "heic", "image": "large", "tile_size": 512},
    {"name": "heic_grid_6", "format": "heic", "image": "large", "tile_size": 512, "orientation": 6},
    {"name": "heic_multi", "format": "heic", "image": "small_a", "images": ["photo", "small_b"], "primary": 1},
    *({"name": f"heic_{k}", "format": "heic", "image": "photo", "orientation": k} for k in ORIENTATIONS),
    {"name": "avif", "format": "avif", "image": "photo"},
    {"name": "avif_10bit", "format": "avif", "image": "photo", "bits": 10},
    {"name": "avif_alpha", "format": "avif", "image": "rgba"},
    {"name": "avif_animated", "format": "avif", "image": "small_a", "frames": ["small_a"]},
    *({"name": f"avif_{k}", "format": "avif", "image": "photo", "orientation": k} for k in ORIENTATIONS),
]


@pytest.fixture(scope="module")
def heif_files(sources) -> dict[str, bytes]:
    return heif_support.encode(SPECS, sources)


def mean_difference(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a.astype(np.float64) - b).mean())


# --------------------------------------------------------------------------- format and brands


def test_formats_are_sniffed_from_the_brands(heif_files):
    for name, data in heif_files.items():
        assert image_codec.sniff_format(data) == name.split("_")[0], name
    sizes, formats = drift.payload_facts([heif_files["heic"], heif_files["avif"], b"\x00\x00\x00\x18ftypisom" + bytes(64)])
    assert formats == ["heic", "avif", "unknown"] and sizes[0] == len(heif_files["heic"])


def test_other_iso_media_and_unaccepted_heif_are_named(heif_files):
    mp4 = b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2" + bytes(512)
    with pytest.raises(ImageError, match=r"looks like ISO media \(MP4, MOV, or HEIF of another coding\)"):
        image_codec.check(mp4, LIMITS)
    with pytest.raises(ImageError, match=r"HEIC is not accepted .*; accepted formats: JPEG, PNG, WEBP"):
        image_codec.check(heif_files["heic"], ImageLimits(max_bytes=10**8, max_pixels=10**8, accepted_formats=("jpeg", "png", "webp")))


# --------------------------------------------------------------------------- decoded pixels


@pytest.mark.parametrize(
    "name, source",
    [
        ("heic", "photo"),
        ("heic_10bit", "photo"),
        ("heic_alpha", "photo"),
        ("avif", "photo"),
        ("avif_10bit", "photo"),
        ("avif_alpha", "photo"),
        ("heic_grid", "large"),
        ("heic_multi", "photo"),
    ],
)
def test_decoded_pixels_are_the_encoded_ones_in_8_bit_rgb(heif_files, sources, name, source):
    """10-bit reduced to 8 bits, alpha dropped as for PNG, a grid put together, the primary of several images."""
    decoded = image_codec.decode(heif_files[name], LIMITS)
    expected = sources[source]
    assert decoded.image.dtype == np.uint8 and decoded.image.flags.c_contiguous
    assert (decoded.height, decoded.width) == expected.shape[:2]
    assert mean_difference(decoded.image, expected) < LOSSY, name


@pytest.mark.parametrize("name", ["heic_grey", "heic_grey_10bit"])
def test_monochrome_becomes_rgb(heif_files, sources, name):
    decoded = image_codec.decode_rgb(heif_files[name], LIMITS)
    assert np.array_equal(decoded[..., 0], decoded[..., 2])
    assert mean_difference(decoded[..., 0], sources["grey"]) < LOSSY


def test_the_header_and_its_images(heif_files):
    header = heif.parse(heif_files["heic_grid_6"], "heic")
    assert (header.width, header.height, header.rotation, header.mirrored) == (1100, 700, 3, False)
    assert header.displayed == (700, 1100)
    (grid,) = heif.check_images(heif_files["heic_grid_6"], header, LIMITS.max_pixels, LIMITS.max_side)
    assert len(grid.tiles) == 6 and (grid.coded_width, grid.coded_height) == (1536, 1024)
    alpha = heif.parse(heif_files["avif_alpha"], "avif")
    assert len(heif.check_images(heif_files["avif_alpha"], alpha, LIMITS.max_pixels, LIMITS.max_side)) == 2  # color and alpha
    multi = heif.parse(heif_files["heic_multi"], "heic")
    # An odd width: libheif codes 452 columns (ispe) and crops to 451 with a clean aperture (clap).
    assert (multi.width, multi.height, multi.cropped) == (452, 300, True)


# --------------------------------------------------------------------------- orientation


@pytest.mark.parametrize("image_format", ["heic", "avif"])
@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_irot_and_imir_are_applied_once_as_a_jpeg_s_exif_orientation(heif_files, sources, image_format, orientation):
    """The encoders write an Exif orientation as irot/imir (pillow-heif also keeps the Exif tag, as an iPhone does):
    the decoded photo is the one a JPEG with that Exif orientation gives, turned once."""
    data = heif_files[f"{image_format}_{orientation}"]
    expected = image_codec.apply_orientation(sources["photo"], orientation)
    decoded = image_codec.decode(data, LIMITS)
    assert (decoded.height, decoded.width) == expected.shape[:2]
    assert mean_difference(decoded.image, expected) < LOSSY
    if image_format == "heic" and orientation != 1:
        exif = Image.Exif()
        exif.load(pi_heif.open_heif(data).info["exif"])
        assert exif[0x0112] == orientation  # both in the file: applying the Exif too would turn it twice


def test_an_exif_orientation_without_irot_is_informational(heif_files, sources):
    """HEIF's irot/imir are normative and Exif's orientation is not (libheif, libavif, browsers): a file whose irot
    says no rotation shows its pixels as stored, whatever its Exif says."""
    data = heif_support.with_irot(heif_files["heic_6"], 0)
    decoded = image_codec.decode_rgb(data, LIMITS)
    stored = image_codec.apply_orientation(image_codec.apply_orientation(sources["photo"], 6), 8)  # heic_6 as stored
    assert mean_difference(decoded, stored) < LOSSY


def test_a_rotated_grid_is_the_rotated_photo(heif_files, sources):
    decoded = image_codec.decode(heif_files["heic_grid_6"], LIMITS)
    assert mean_difference(decoded.image, image_codec.apply_orientation(sources["large"], 6)) < LOSSY


# --------------------------------------------------------------------------- refused before decoding


@pytest.mark.parametrize("name", ["heic", "heic_grid", "heic_alpha", "avif", "avif_10bit", "avif_alpha"])
def test_a_cut_file_is_truncated(heif_files, name):
    data = heif_files[name]
    image_format = name.split("_")[0].upper()
    for cut in (len(data) // 2, len(data) - 10, 300, 40):
        with pytest.raises(ImageError, match=f"truncated {image_format}"):
            image_codec.decode(data[:cut], LIMITS)
    with pytest.raises(ImageError, match=f"corrupt {image_format}: no meta box"):
        image_codec.decode(data[:20], LIMITS)


# The coded pictures: x265 codes 8 x 8 blocks (and libheif pads the odd width), AV1 any size.
CODED = {"heic": ("HEVC", 452, "456x304"), "avif": ("AV1", 451, "451x300")}


@pytest.mark.parametrize("name", ["heic", "avif"])
def test_a_container_that_lies_about_the_size_is_refused_before_decoding(heif_files, name):
    data = heif_files[name]
    coding, width, coded = CODED[name]
    for lie in ((225, 150), (902, 600), (width, 305)):  # smaller, larger, a few rows more than coded
        with pytest.raises(ImageError, match=rf"declares {lie[0]}x{lie[1]} \(ispe\), its {coding} stream codes {coded}"):
            image_codec.check(heif_support.with_ispe(data, *lie), LIMITS)
    with pytest.raises(ImageError, match=f"{name.upper()} declares 100000x100000 = 10000000000 pixels, over the limit"):
        image_codec.check(heif_support.with_ispe(data, 100_000, 100_000), LIMITS)
    with pytest.raises(ImageError, match="declared size 0x300"):
        image_codec.check(heif_support.with_ispe(data, 0, 300), LIMITS)


def test_a_grid_whose_tiles_lie_is_refused(heif_files):
    data = heif_files["heic_grid"]  # ispe 0: the grid's; 1: the tiles' (shared)
    with pytest.raises(ImageError, match=r"item 2 declares 4000x4000 \(ispe\), its HEVC stream codes 512x512"):
        image_codec.check(heif_support.with_ispe(data, 4000, 4000, index=1), LIMITS)
    # The grid (its ispe and its descriptor in idat: version, flags, rows - 1, columns - 1, 16-bit width, height) wider
    # than its 3 columns of 512.
    wider = heif_support.patch_property(
        heif_support.with_ispe(data, 2000, 700), b"idat", bytes([0, 0, 1, 2]) + struct.pack(">HH", 2000, 700)
    )
    with pytest.raises(ImageError, match="grid 1 of 3x2 tiles of 512x512 does not tile 2000x700"):
        image_codec.check(wider, LIMITS)
    with pytest.raises(ImageError, match=r"declares 100x100 \(ispe\), its HEVC stream codes 512x512"):
        image_codec.check(heif_support.with_ispe(data, 100, 100, index=1), LIMITS)
    with pytest.raises(ImageError, match="grid 1 is 1100x700, its ispe declares 1100x800"):
        image_codec.check(heif_support.with_ispe(data, 1100, 800), LIMITS)


def test_grid_tiles_count_against_the_pixel_limit(heif_files):
    """1100 x 700 (0.77 MP) in 3 x 2 tiles of 512 decodes 1.57 MP: over 1 MP plus an eighth."""
    limits = ImageLimits(max_bytes=10**8, max_pixels=1_000_000, accepted_formats=("heic",))
    with pytest.raises(ImageError, match="HEIC grid tiles hold 1572864 pixels, over the limit of 1000000 pixels"):
        image_codec.check(heif_files["heic_grid"], limits)
    image_codec.check(heif_files["heic_grid"], ImageLimits(max_bytes=10**8, max_pixels=1_400_000, accepted_formats=("heic",)))


def test_animated_avif_and_other_codings_are_refused(heif_files):
    with pytest.raises(ImageError, match=r"animated AVIF \(an image sequence\) is not accepted"):
        image_codec.check(heif_files["avif_animated"], LIMITS)
    jpeg_coded = heif_files["heic"].replace(b"hvc1", b"jpeg", 1)  # the primary item's type, in iinf
    with pytest.raises(ImageError, match="HEIC whose primary image is JPEG is not accepted"):
        image_codec.check(jpeg_coded, LIMITS)
    no_primary = heif_files["heic"].replace(b"pitm", b"xxxx", 1)
    with pytest.raises(ImageError, match="corrupt HEIC: no primary image item"):
        image_codec.check(no_primary, LIMITS)


def test_the_coded_sizes_are_read_from_the_streams(heif_files):
    """From the HEVC sequence parameter set and the AV1 sequence header."""
    for name in ("heic", "heic_10bit", "avif", "avif_10bit"):
        data = heif_files[name]
        header = heif.parse(data, name.split("_")[0])
        (image,) = heif.check_images(data, header, LIMITS.max_pixels, LIMITS.max_side)
        _, width, coded = CODED[header.format]
        assert (image.width, image.height) == (width, 300) and f"{image.coded_width}x{image.coded_height}" == coded, name


# --------------------------------------------------------------------------- robustness


def mutations(data: bytes, count: int, seed: int) -> list[bytes]:
    """Copies of ``data`` with a few bytes of its first kilobyte (the boxes before the coded data) changed."""
    rng = np.random.default_rng(seed)
    head = min(len(data), 1024)
    out = []
    for _ in range(count):
        mutated = bytearray(data)
        for position in rng.integers(0, head, size=int(rng.integers(1, 4))):
            mutated[position] = int(rng.integers(0, 256))
        out.append(bytes(mutated))
    return out


@pytest.mark.parametrize("name", ["heic_grid_6", "heic_alpha", "avif_alpha"])
def test_mutated_headers_raise_image_errors_only(heif_files, name):
    """Whatever the boxes say, decode answers pixels or an ImageError: nothing else escapes (an unexpected
    exception inside a Triton execute() would fail its whole dynamic batch)."""
    outcomes = {"ok": 0, "refused": 0}
    for data in mutations(heif_files[name], 80, seed=zlib.crc32(name.encode())):
        try:
            decoded = image_codec.decode(data, LIMITS)
        except ImageError:
            outcomes["refused"] += 1
            continue
        assert decoded.image.dtype == np.uint8 and decoded.image.ndim == 3
        outcomes["ok"] += 1
    assert outcomes["refused"] > 10, outcomes


def test_the_decoders_threads_follow_the_preprocess_setting():
    try:
        preprocessing.set_threads(3)
        assert pi_heif.options.DECODE_THREADS == 3 and AvifImagePlugin.DEFAULT_MAX_THREADS == 3
    finally:
        preprocessing.set_threads(1)
    assert pi_heif.options.DECODE_THREADS == 1


def test_an_item_type_that_is_not_a_four_character_code_is_refused(heif_files):
    """pi-heif 1.4.0 crashed (a segmentation fault) reading the metadata of such an item (its Exif here): the
    parser refuses it, and the decoder reads no metadata at all (vision_serving.heif._decode_heic)."""
    mangled = heif_files["heic_grid_6"].replace(b"Exif", b"E\xe5if", 1)  # the Exif item's entry in iinf
    with pytest.raises(ImageError, match=r"item 8's type b'E\\xe5if' is not a four-character code"):
        image_codec.decode(mangled, LIMITS)


def test_an_avif_whose_major_brand_is_an_av1_profile_is_decoded(heif_files, sources):
    """Brands name the format wherever they are listed: major brand MA1B (AV1 baseline profile), 'avif' compatible."""
    data = heif_files["avif"][:8] + b"MA1B" + heif_files["avif"][12:]
    assert b"avif" in data[16:32] and image_codec.sniff_format(data) == "avif"
    assert mean_difference(image_codec.decode_rgb(data, LIMITS), sources["photo"]) < LOSSY
