"""The decode-cost comparison's decoders (benchmarks/decode_cost.py): each decodes a valid PNG and refuses a broken one."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from benchmarks import decode_cost


@pytest.mark.parametrize("name", sorted(decode_cost.PNG_DECODERS))
def test_each_png_decoder_decodes_a_valid_png_and_refuses_corrupt_pixel_data(name):
    image = np.random.default_rng(0).integers(0, 256, (40, 50, 3), np.uint8)
    data = cv2.imencode(".png", image)[1].tobytes()
    decoder = decode_cost.PNG_DECODERS[name]
    assert decode_cost.cpu_s(lambda: decoder(data))[1] == "decoded"
    start = data.index(b"IDAT") + 40
    broken = data[:start] + bytes(200) + data[start + 200 :]
    assert decode_cost.cpu_s(lambda: decoder(broken))[1].startswith("refused")


def test_a_short_run_reports_every_format():
    report = decode_cost.measure(cases=60, seed=1, limits=decode_cost.served_limits(), phone_photos=0)
    assert set(report["mutant_cost_over_valid"]) == {"jpeg", "png", "webp", "heic", "avif"}
    assert set(report["png_decoders"]) == {"mutants_past_the_checks", *decode_cost.PNG_DECODERS}
    shares = report["structure_cost"]
    assert len(shares["uploads"]) >= 20 and 0 < shares["total_share_percent"] <= shares["max_share_percent"] < 100
