"""vision_serving.tiling: the settings (spec, config, request), SAHI's tile grid, the views' cut and the core's batches."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from vision_serving import model_config, preprocessing, tiling
from vision_serving.image_codec import Decoded
from vision_serving.model_config import ConfigError, ModelConfig

# SAHI 0.12.8's get_slice_bboxes(height, width, tile_height, tile_width, False, overlap, overlap), as it answers them.
SAHI_1000_SQUARE_512 = [
    (0, 0, 512, 512), (410, 0, 922, 512), (488, 0, 1000, 512),
    (0, 410, 512, 922), (410, 410, 922, 922), (488, 410, 1000, 922),
    (0, 488, 512, 1000), (410, 488, 922, 1000), (488, 488, 1000, 1000),
]  # fmt: skip
SAHI_1600x1200_320_FIRST = [(0, 0, 320, 320), (256, 0, 576, 320), (512, 0, 832, 320), (768, 0, 1088, 320), (1024, 0, 1344, 320)]
SAHI_1000x700_192x128_AT_025_LAST = [(576, 572, 768, 700), (720, 572, 912, 700), (808, 572, 1000, 700)]


def test_the_grid_is_sahi_s():
    assert tiling.slice_boxes(1000, 1000, 512, 512, 0.2) == SAHI_1000_SQUARE_512
    boxes = tiling.slice_boxes(1200, 1600, 320, 320, 0.2)
    assert boxes[:5] == SAHI_1600x1200_320_FIRST and len(boxes) == 30
    boxes = tiling.slice_boxes(700, 1000, 128, 192, 0.25)
    assert boxes[-3:] == SAHI_1000x700_192x128_AT_025_LAST and len(boxes) == 49
    assert len(tiling.slice_boxes(3024, 4032, 640, 640, 0.2)) == 48  # a 12 MP phone photo
    assert tiling.slice_boxes(300, 200, 512, 512, 0.2) == [(0, 0, 200, 300)]  # smaller than a tile: the photo


def test_the_views_add_the_full_view_only_to_several_tiles_and_are_bounded():
    settings = tiling.Tiling(tile_size=(512, 512))
    views = tiling.views(1000, 1000, settings, (640, 640))
    assert views.tolist() == [list(box) for box in SAHI_1000_SQUARE_512] + [[0, 0, 1000, 1000]] and views.dtype == np.int32
    assert tiling.views(300, 200, settings, (640, 640)).tolist() == [[0, 0, 200, 300]]
    assert len(tiling.views(1000, 1000, tiling.Tiling(tile_size=(512, 512), full_view=False), (640, 640))) == 9
    assert tiling.views(1000, 1000, tiling.Tiling(enabled=False), (640, 640)).tolist() == [[0, 0, 1000, 1000]]
    # The tile defaults to the model's input.
    assert len(tiling.views(1000, 1000, tiling.Tiling(), (512, 512))) == 10
    with pytest.raises(ValueError) as refused:
        tiling.views(3024, 4032, tiling.Tiling(tile_size=(320, 320), max_tiles=64), (640, 640))
    message = str(refused.value)
    assert "4032x3024 photo needs 193 views (192 tiles of 320x320 at overlap 0.2 and the full view)" in message
    assert "limit of 64 (max_tiles)" in message


def test_a_request_overrides_the_settings_per_photo():
    base = tiling.Tiling()
    assert base.with_request(b"") is base
    assert base.with_request(b"false").enabled is False and base.with_request("true").enabled is True
    changed = base.with_request(b'{"tile_size": 512, "overlap": 0.25, "merge": "nms", "match": "iou", "class_agnostic": true}')
    assert (changed.tile_size, changed.overlap, changed.merge, changed.match, changed.class_agnostic) == (
        (512, 512),
        0.25,
        "nms",
        "iou",
        True,
    )
    assert base.with_request(b'{"tile_size": [256, 384], "full_view": false}').tile_size == (256, 384)
    settings = tiling.request_settings(base, np.array([[b'{"enabled": false}'], [b""]], dtype=object), 2)
    assert [item.enabled for item in settings] == [False, True]
    assert tiling.request_settings(base, None, 3) == [base] * 3


@pytest.mark.parametrize(
    ("sent", "said"),
    [
        (b"{", "TILING must be JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"max_tiles": 1000}', "unknown key(s) max_tiles; a request may set enabled, tile_size"),
        (b'{"tile_size": 0}', "tile_size must be a positive integer or [height, width]"),
        (b'{"tile_size": [1, 2, 3]}', "tile_size must be a positive integer"),
        (b'{"overlap": 1.0}', "overlap must be in [0, 1)"),
        (b'{"overlap": "a lot"}', "overlap must be a number"),
        (b'{"merge": "wbf"}', "merge must be one of greedy_nmm, nms"),
        (b'{"match": "giou"}', "match must be one of ios, iou"),
        (b'{"merge_threshold": 1.5}', "merge_threshold must be in [0, 1]"),
        (b'{"enabled": "yes"}', "enabled must be true or false"),
    ],
)
def test_a_bad_request_is_refused_naming_what_is_wrong(sent, said):
    with pytest.raises(ValueError, match=None) as refused:
        tiling.Tiling().with_request(sent)
    assert said in str(refused.value)


def test_the_spec_s_table_becomes_both_steps_parameters_with_defaults_in_code():
    assert tiling.config_parameters({}) == tiling.DEFAULTS
    parameters = tiling.config_parameters({"tile_size": [512, 768], "overlap": 0.25, "merge": "nms", "max_tiles": 100, "enabled": False})
    assert parameters["tile_size"] == "512,768" and parameters["tile_overlap"] == "0.25" and parameters["tile_merge"] == "nms"
    assert parameters["max_tiles"] == "100" and parameters["tiling"] == "false" and parameters["tile_match"] == "ios"
    for table, said in (({"tiles": 3}, "unknown key(s) tiles"), ({"max_tiles": 0}, "max_tiles must be a positive integer")):
        with pytest.raises(ValueError, match=said.replace("(", r"\(").replace(")", r"\)")):
            tiling.config_parameters(table)
    config = ModelConfig(name="step")
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    assert tiling.is_tiled(config) and not tiling.is_tiled(ModelConfig(name="other"))
    assert tiling.Tiling.from_config(config) == tiling.Tiling(False, (512, 768), 0.25, True, "nms", "ios", 0.5, False, 100)
    config.parameters["tile_size"].string_value = "big"
    with pytest.raises(ConfigError, match="model 'step': tiling: tile_size must be 'input', N or H,W"):
        tiling.Tiling.from_config(config)


def _preprocess_config(height: int = 64, width: int = 96) -> ModelConfig:
    """A tiled preprocess's config: Ultralytics' letterbox per view, uint8 NCHW."""
    config = model_config.parse_config_text(
        f'name: "p_preprocess" backend: "python" max_batch_size: 4 '
        f'output [{{ name: "TILES" data_type: TYPE_UINT8 dims: [-1, 3, {height}, {width}] }}, '
        f'{{ name: "TILE_BOXES" data_type: TYPE_INT32 dims: [-1, 4] }}, {{ name: "TILE_TRANSFORMS" data_type: TYPE_FP32 dims: [-1, 4] }}, '
        f'{{ name: "IMAGE_SIZE" data_type: TYPE_INT32 dims: [2] }}]'
    )
    values = {**tiling.DEFAULTS, "resize": "yolo_letterbox", "interpolation": "bilinear", "mean": "0,0,0", "std": "255,255,255"}
    values["decode_oversampling"] = "0"
    for key, value in values.items():
        config.parameters[key].string_value = value
    return config


def test_each_view_is_the_untiled_resize_of_its_pixels_and_the_photos_are_padded():
    preprocess = tiling.TilePreprocess.from_config(_preprocess_config())
    rng = np.random.default_rng(0)
    big, small = rng.integers(0, 256, (150, 200, 3), np.uint8), rng.integers(0, 256, (40, 50, 3), np.uint8)
    decoded = [Decoded(big, 150, 200), Decoded(small, 40, 50)]
    out = preprocess.outputs(decoded, [tiling.Tiling(), tiling.Tiling()])
    boxes = out[tiling.TILE_BOXES]
    expected = [*tiling.slice_boxes(150, 200, 64, 96, 0.2), (0, 0, 200, 150)]
    assert boxes[0, : len(expected)].tolist() == [list(box) for box in expected]
    assert boxes[1].tolist() == [[0, 0, 50, 40]] + [[0, 0, 0, 0]] * (len(expected) - 1)  # one view, padded
    assert out[tiling.TILES].shape == (2, len(expected), 3, 64, 96) and out[tiling.IMAGE_SIZE].tolist() == [[150, 200], [40, 50]]
    spec = preprocess.spec
    for index, (x0, y0, x1, y1) in enumerate(expected):
        alone = preprocessing.preprocess_outputs([Decoded(np.ascontiguousarray(big[y0:y1, x0:x1]), y1 - y0, x1 - x0)], spec, _outputs())
        np.testing.assert_array_equal(out[tiling.TILES][0, index], alone["PIXELS"][0])
        np.testing.assert_array_equal(out[tiling.TILE_TRANSFORMS][0, index], alone["TRANSFORM"][0])
    views = tiling.real_tiles(out[tiling.TILES], boxes)
    assert len(views) == len(expected) + 1
    np.testing.assert_array_equal(views[-1], out[tiling.TILES][1, 0])


def _outputs() -> preprocessing.PreprocessOutputs:
    return preprocessing.PreprocessOutputs("PIXELS", "SIZE", "TRANSFORM")


def test_an_untiled_photo_may_be_a_reduced_decode_and_is_the_untiled_pipeline_s_input():
    config = _preprocess_config()
    config.parameters["decode_oversampling"].string_value = "2"
    preprocess = tiling.TilePreprocess.from_config(config)
    off = tiling.Tiling(enabled=False)
    assert preprocess.minimum(off) == preprocessing.decode_minimum(preprocess.spec) and preprocess.minimum(tiling.Tiling()) is None
    reduced = np.random.default_rng(1).integers(0, 256, (100, 150, 3), np.uint8)
    out = preprocess.outputs([Decoded(reduced, 400, 600)], [off])
    alone = preprocessing.preprocess_outputs([Decoded(reduced, 400, 600)], preprocess.spec, _outputs())
    np.testing.assert_array_equal(out[tiling.TILES][0, 0], alone["PIXELS"][0])
    with pytest.raises(ValueError, match="a tile of a 600x400 photo needs its full decode"):
        preprocess.outputs([Decoded(reduced, 400, 600)], [tiling.Tiling(tile_size=(200, 300))])


def test_a_photo_past_the_limit_names_itself_in_its_request():
    preprocess = tiling.TilePreprocess.from_config(_preprocess_config(8, 8))
    image = np.zeros((100, 100, 3), np.uint8)
    with pytest.raises(ValueError, match=r"^image 1 of 2: a 100x100 photo needs 226 views"):
        preprocess.outputs([Decoded(image[:8, :8], 8, 8), Decoded(image, 100, 100)], [tiling.Tiling()] * 2)


def test_the_core_gets_requests_of_at_most_its_batch_all_at_once_answers_in_order():
    sizes = []

    async def core(batch: np.ndarray) -> tuple[np.ndarray, ...]:
        sizes.append(len(batch))
        await asyncio.sleep(0.001 * (5 - len(sizes)))  # answered out of order
        return batch * 2, batch[:, :1]

    tiles = np.arange(37 * 3, dtype=np.float32).reshape(37, 3)
    doubled, first = asyncio.run(tiling.in_batches(tiles, 16, core))
    assert sorted(sizes) == [5, 16, 16]
    np.testing.assert_array_equal(doubled, tiles * 2)
    np.testing.assert_array_equal(first, tiles[:, :1])

    async def short(batch: np.ndarray) -> tuple[np.ndarray, ...]:
        return (batch[:-1],)

    with pytest.raises(ValueError, match="a request of 16 tiles was answered with 15 rows"):
        asyncio.run(tiling.in_batches(tiles, 16, short))
