"""benchmarks.soak's uploads: random sizes and formats, a share of them broken in ways the server must refuse."""

from __future__ import annotations

import pytest

from benchmarks import images, soak
from vision_serving import image_codec

LIMITS = image_codec.ImageLimits(max_bytes=20_971_520, max_pixels=50_000_000, accepted_formats=("jpeg", "png", "webp"))


def test_uploads_are_of_many_sizes_and_the_broken_ones_are_refused(monkeypatch):
    phone = images.jpeg_payloads(("coffee",), (400,))[0]  # a stand-in for the 12 MP photos (encoding those takes seconds)
    monkeypatch.setattr(soak.images, "phone_payloads", lambda: (images.Payload("coffee@12MP", phone.width, phone.height, phone.data),))
    uploads = soak.make_uploads(36, bad_share=0.3, seed=1)
    assert len(uploads) == 36 and sum(u.bad for u in uploads) >= 4
    assert sum(u.name == "coffee@12MP" for u in uploads) == 3  # one in twelve is a phone photo
    sizes = set()
    for upload in uploads:
        if upload.bad:
            with pytest.raises(image_codec.ImageError):
                image_codec.decode(upload.data, LIMITS)
        else:
            decoded = image_codec.decode(upload.data, LIMITS)
            sizes.add((decoded.height, decoded.width))
    assert len(sizes) >= 20  # nearly every upload its own size (the text detector's shapes)
    assert max(max(size) for size in sizes) > 2000 and min(max(size) for size in sizes) < 1000
