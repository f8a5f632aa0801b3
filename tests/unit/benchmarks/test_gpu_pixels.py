"""benchmarks.gpu_pixels: the table of both modes from one recorded run and the capacity planner's hops."""

from __future__ import annotations

import json

from benchmarks import gpu_pixels
from tests.unit.benchmarks.test_capacity import costs, pixel_costs


def test_the_table_sets_both_modes_side_by_side(tmp_path, capsys):
    (tmp_path / "capacity.json").write_text(json.dumps(costs()))
    (tmp_path / "gpu_pixels.json").write_text(json.dumps(pixel_costs()))
    arguments = ["--results", str(tmp_path / "gpu_pixels.json"), "--costs", str(tmp_path / "capacity.json")]
    assert gpu_pixels.main([*arguments, "--vcpus", "8", "--gpu-images-per-s", "3000"]) == 0
    out = capsys.readouterr().out
    # web: CPU mode 6.0 + 0.2 + 1.0 ms, 10.3 vCPUs per 1000 images/s at 70 %; GPU mode 0.2 + 0.2 + 1.0 ms: 2.0 vCPUs,
    # and 8 vCPUs serve 4000 images/s, more than the GPU's 3000.
    assert "| p | web | cpu | 6.00 | 0.20 | 1.00 | 7.20 | 10.3 | 26 % |" in out
    assert "| p | web | gpu | 0.20 | 0.20 | 1.00 | 1.40 | 2.0 | 100 % |" in out
    assert gpu_pixels.main(["--results", str(tmp_path / "missing.json")]) == 2
    assert "run with --measure" in capsys.readouterr().err
