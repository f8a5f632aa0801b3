"""Real photos shipped inside installed packages (nothing is downloaded).

scikit-image's wheel carries a few photographs in ``skimage/data/``; its
``skimage.data`` fetch functions may download, so this module reads the files
from the package folder directly. Synthetic images in that folder (color
wheel, checkerboards, logo, phantom, horse silhouette) are not listed, and a
listed photo is only offered if its file is actually present in the wheel.

The build steps (the calibration and held-out sets of :mod:`builders.calibration`,
the export's verification) and the tests use these photos; they are encoded bytes,
as clients send them, so callers run the served decode/preprocess code.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from builders import BuildError


@dataclass(frozen=True)
class Photo:
    name: str
    filename: str
    description: str


# Photographs in skimage/data/ (scikit-image 0.26); the description says what
# an ImageNet classifier sees. Grayscale ones decode to 3 equal channels.
SKIMAGE_PHOTOS: tuple[Photo, ...] = (
    Photo("astronaut", "astronaut.png", "portrait of astronaut Eileen Collins with a flag (color)"),
    Photo("brick", "brick.png", "brick wall texture (gray)"),
    Photo("camera", "camera.png", "man with a camera on a tripod (gray)"),
    Photo("cell", "cell.png", "cell floating in saline, microscope (gray)"),
    Photo("chelsea", "chelsea.png", "Chelsea the cat (color)"),
    Photo("clock_motion", "clock_motion.png", "motion-blurred wall clock (gray)"),
    Photo("coffee", "coffee.png", "cup of espresso on a saucer (color)"),
    Photo("coins", "coins.png", "Greek coins from Pompeii (gray)"),
    Photo("grass", "grass.png", "grass texture (gray)"),
    Photo("gravel", "gravel.png", "gravel texture (gray)"),
    Photo("hubble_deep_field", "hubble_deep_field.jpg", "Hubble eXtreme Deep Field (color)"),
    Photo("ihc", "ihc.png", "immunohistochemistry stain, microscope (color)"),
    Photo("microaneurysms", "microaneurysms.png", "retina detail with microaneurysms (gray)"),
    Photo("moon", "moon.png", "surface of the moon (gray)"),
    Photo("motorcycle_left", "motorcycle_left.png", "motorcycle, left stereo view (color)"),
    Photo("motorcycle_right", "motorcycle_right.png", "motorcycle, right stereo view (color)"),
    Photo("page", "page.png", "scanned page of text (gray)"),
    Photo("retina", "retina.jpg", "fundus photograph of a human retina (color)"),
    Photo("rocket", "rocket.jpg", "SpaceX Falcon 9 on the launch pad (color)"),
    Photo("text", "text.png", "photograph of printed text (gray)"),
)


# Photographs in other packages' wheels, offered only where that package is
# installed (requirements/builder.in pins both): (import name, photo with
# a path relative to the package folder).
OTHER_PACKAGE_PHOTOS: tuple[tuple[str, Photo], ...] = (
    ("sklearn", Photo("china", "datasets/images/china.jpg", "Summer Palace, Beijing: pavilion and trees (color)")),
    ("sklearn", Photo("flower", "datasets/images/flower.jpg", "close-up of a pink flower (color)")),
    ("matplotlib", Photo("grace_hopper", "mpl-data/sample_data/grace_hopper.jpg", "portrait of Grace Hopper in uniform (color)")),
)


def _package_dir(module: str) -> Path | None:
    """Folder of an installed package, located without importing it (None if absent)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


class PhotoError(BuildError):
    """A requested photo is not known or not present in the installed package."""


def skimage_data_dir() -> Path:
    """``skimage/data`` of the installed scikit-image, located without importing it."""
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise PhotoError("scikit-image is not installed; it provides the sample photos (pip install scikit-image)")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


@functools.cache
def registry() -> dict[str, Path]:
    """Photo name -> file, for the photos present in the installed packages (sorted by name)."""
    data_dir = skimage_data_dir()
    found = {photo.name: data_dir / photo.filename for photo in SKIMAGE_PHOTOS if (data_dir / photo.filename).is_file()}
    for module, photo in OTHER_PACKAGE_PHOTOS:
        package_dir = _package_dir(module)
        if package_dir is not None and (package_dir / photo.filename).is_file():
            found[photo.name] = package_dir / photo.filename
    return dict(sorted(found.items()))


def photo_path(name: str) -> Path:
    photos = registry()
    if name not in photos:
        raise PhotoError(f"no photo named {name!r}; available: {', '.join(photos) or 'none'}")
    return photos[name]


def photo_bytes(name: str) -> bytes:
    """The encoded file (PNG or JPEG), exactly as stored in the package."""
    return photo_path(name).read_bytes()
