"""The text reader's plain computation on synthetic inputs: detection input, box growing, DB boxes, crops, CTC.

Expected values are RapidOCR 3.10.0's (its wheel's code, cited in the modules); the box-growing
points are pyclipper 1.4.0's own answers, recorded with ``tests/support/rapidocr_reference.py
unclip`` (tests/onnx/vision_serving/test_text_reading.py checks 300 more against pyclipper live).
"""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from vision_serving.tasks.text_reading import detection, offset, reader, recognition
from vision_serving.tasks.text_reading.settings import DEFAULT, ClassifierSettings, DetectionSettings, RecognitionSettings

DET = DEFAULT.detection
REC = DEFAULT.recognition

# (float32 box, pyclipper's Execute points in its order, get_mini_boxes' box, its short side): recorded.
PYCLIPPER = [
    (
        [[10.7, 20.2], [50.9, 20.2], [50.9, 35.6], [10.7, 35.6]],
        [[54, 12], [57, 15], [59, 20], [59, 35], [58, 39], [55, 42], [50, 44], [10, 44], [6, 43], [3, 40], [1, 35], [1, 20], [2, 16],
         [5, 13], [10, 11], [50, 11]],
        [[1.0, 11.0], [59.0, 11.0], [59.0, 44.0], [1.0, 44.0]],
        33.0,
    ),
    (
        [[-0.6, 3.4], [30.2, 1.1], [31.0, 12.9], [0.1, 15.3]],
        [[33, -5], [36, -3], [37, 0], [38, 11], [37, 15], [35, 18], [32, 19], [1, 22], [-3, 21], [-6, 19], [-7, 15], [-7, 3], [-6, -1],
         [-3, -3], [0, -4], [30, -6]],
        [[-8.65573501586914, -3.213115692138672], [36.3360710144043, -7.303278923034668], [38.68852615356445, 18.573768615722656],
         [-6.303279876708984, 22.66393280029297]],
        25.9837589263916,
    ),
    (
        [[461.0, 409.0], [465.0, 424.0], [461.0, 425.0], [456.0, 410.0]],
        [[463, 407], [464, 408], [468, 423], [467, 426], [466, 427], [462, 428], [459, 427], [458, 426], [453, 411], [455, 407], [460, 406]],
        [[452.136962890625, 407.7635192871094], [463.153564453125, 404.8257751464844], [468.86309814453125, 426.2365417480469],
         [457.84649658203125, 429.1742858886719]],
        11.401571273803711,
    ),
    (
        [[727.0000610351562, 272.52362060546875], [851.9791870117188, 308.9573669433594], [842.7846069335938, 340.4976806640625],
         [717.8054809570312, 304.06396484375]],
        [[733, 252], [857, 288], [863, 291], [867, 295], [871, 301], [872, 307], [871, 314], [862, 346], [860, 352], [850, 360], [843, 361],
         [836, 360], [711, 324], [705, 321], [701, 317], [697, 311], [696, 305], [697, 298], [707, 266], [710, 260], [714, 255], [720, 252],
         [726, 251]],
        [[711.9905395507812, 245.94927978515625], [877.1182250976562, 293.50604248046875], [856.2854614257812, 365.84222412109375],
         [691.1577758789062, 318.28546142578125]],
        75.27632141113281,
    ),
]  # fmt: skip


# --------------------------------------------------------------------------- growing boxes


@pytest.mark.parametrize(("box", "points", "fitted", "short_side"), PYCLIPPER)
def test_unclip_gives_pyclipper_s_points_in_its_order_and_the_same_fitted_box(box, points, fitted, short_side):
    grown = detection.unclip(np.array(box, np.float32), DET.unclip_ratio)
    assert grown.shape[1:] == (1, 2) and grown.dtype == np.int32
    assert grown.reshape(-1, 2).tolist() == points
    got, side = detection.mini_box(grown)
    np.testing.assert_array_equal(got, np.array(fitted, np.float32))
    assert side == pytest.approx(short_side, rel=1e-6)


def test_clipper_rounds_half_away_from_zero_and_truncates_its_input():
    assert [offset.clipper_round(v) for v in (0.5, 1.49, -0.5, -1.5, -1.49)] == [1, 1, -1, -2, -1]
    # -0.6 becomes 0 (truncated, as pyclipper converts a float), so the grown square starts at -1.
    grown = offset.round_offset([[-0.6, 0.4], [10.9, 0.4], [10.9, 10.9], [-0.6, 10.9]], 1.0)
    assert grown[:, 0].min() == -1 and grown[:, 0].max() == 11 and grown[:, 1].min() == -1 and grown[:, 1].max() == 11


def test_an_axis_aligned_box_grows_by_the_distance_on_every_side():
    grown = offset.offset([[100, 50], [300, 50], [300, 90], [100, 90]], 12.0)
    assert (grown[:, 0].min(), grown[:, 0].max(), grown[:, 1].min(), grown[:, 1].max()) == (88, 312, 38, 102)
    # round corners: no point of the arcs lies outside the distance (up to rounding)
    corner = grown[(grown[:, 0] > 300) & (grown[:, 1] > 90)]
    assert len(corner) and np.all(np.hypot(corner[:, 0] - 300, corner[:, 1] - 90) <= 12.0 + 0.75)


def test_degenerate_paths_grow_into_nothing():
    assert offset.offset([[1, 1], [1, 1], [5, 5]], 3.0).shape == (0, 2)
    assert offset.offset([[0, 0], [4, 0], [4, 4], [0, 4]], 0.0).shape == (0, 2)
    assert offset.convex_union(np.array([[0, 0], [2, 0], [4, 0]])).shape == (0, 2)


def test_the_union_order_is_clockwise_and_ends_at_the_top_most_point():
    square = np.array([[0, 10], [0, 0], [5, 0], [10, 0], [10, 10]])  # counter-clockwise on screen, a collinear point
    assert offset.convex_union(square).tolist() == [[10, 10], [0, 10], [0, 0], [10, 0]]


def test_polygon_area_and_perimeter_are_shapely_s():
    box = np.array([[0, 0], [4, 0], [4, 3], [0, 3]], np.float32)
    assert detection.polygon_area(box) == 12.0 and detection.polygon_perimeter(box) == 14.0
    rotated = np.array([[1, 0], [2, 1], [1, 2], [0, 1]], np.float32)
    assert detection.polygon_area(rotated) == pytest.approx(2.0) and detection.polygon_perimeter(rotated) == pytest.approx(4 * math.sqrt(2))


# --------------------------------------------------------------------------- the detector's input


def test_photos_are_resized_within_the_side_limits_to_multiples_of_32():
    big, ratio_h, ratio_w = detection.resize_within_bounds(np.zeros((1000, 3000, 3), np.uint8), 30, 2000)
    # 2000 / 3000 x 3000 = 1999.99.. truncated to 1999, to 62 x 32; 666 to 21 x 32
    assert big.shape[:2] == (672, 1984) and (ratio_h, ratio_w) == (1000 / 672, 3000 / 1984)
    small, ratio_h, ratio_w = detection.resize_within_bounds(np.zeros((20, 100, 3), np.uint8), 30, 2000)
    assert small.shape[:2] == (32, 160) and (ratio_h, ratio_w) == (20 / 32, 100 / 160)
    same, ratio_h, ratio_w = detection.resize_within_bounds(np.zeros((517, 301, 3), np.uint8), 30, 2000)
    assert same.shape[:2] == (517, 301) and (ratio_h, ratio_w) == (1.0, 1.0)


def test_a_very_wide_or_short_image_is_padded_above_and_below():
    padded, top = detection.vertical_padding(np.full((40, 800, 3), 255, np.uint8), 8, 30)
    # 800 / 40 > 8: padded to about 2 x 800 / 8 rows, (200 - 40) / 2 above and below
    assert top == 80 and padded.shape[:2] == (200, 800)
    assert padded[:80].max() == 0 and padded[120:].max() == 0 and padded[80:120].min() == 255
    short, top = detection.vertical_padding(np.zeros((20, 100, 3), np.uint8), 8, 30)
    assert top == 20 and short.shape[:2] == (60, 100)  # at most 30 tall: padded to 2 x 30
    same, top = detection.vertical_padding(np.zeros((300, 400, 3), np.uint8), 8, 30)
    assert top == 0 and same.shape[:2] == (300, 400)


def test_the_detector_input_scales_the_shorter_side_up_to_736_with_python_rounding():
    assert detection.detection_size(512, 640, 736) == (736, 928)  # 640 x 1.4375 = 920 -> 28.75 x 32 -> 928
    assert detection.detection_size(800, 1200, 736) == (800, 1216)  # never down: 1200 / 32 = 37.5 -> round half even 38
    assert detection.detection_size(1000, 1016, 736) == (992, 1024)  # 31.25 -> 31, 31.75 -> 32
    assert detection.detection_size(600, 900, 960, "max") == (608, 896)


def test_normalization_maps_pixels_to_minus_one_to_one_in_bgr_chw():
    image = np.zeros((2, 3, 3), np.uint8)
    image[..., 0], image[..., 2] = 255, 51
    values = detection.normalize(image, DET.mean, DET.std)
    assert values.dtype == np.float32 and values.shape == (3, 2, 3)
    assert np.all(values[0] == 1.0) and np.all(values[1] == -1.0) and np.allclose(values[2], 51 / 255 * 2 - 1)


def test_the_served_detector_s_normalization_of_uint8_pixels_is_rapidocr_s():
    """The detector takes uint8 BGR pixels and computes (pixel - 127.5) / 127.5 in its graph: RapidOCR's
    (pixel / 255 - 0.5) / 0.5 within a float32 rounding, for every pixel value."""
    mean, std = detection.pixel_normalization(DET)
    assert mean == (127.5, 127.5, 127.5) and std == (127.5, 127.5, 127.5)
    every = np.arange(256, dtype=np.uint8).reshape(16, 16)
    image = np.stack([every, every[::-1], every.T], axis=2)
    graph = (image.transpose(2, 0, 1).astype(np.float32) - np.float32(127.5)) / np.float32(127.5)
    np.testing.assert_allclose(graph, detection.normalize(image, DET.mean, DET.std), rtol=0, atol=2e-7)


def test_prepare_records_the_resize_and_the_padding():
    prepared = detection.prepare(np.zeros((40, 800, 3), np.uint8), DET)
    assert prepared is not None
    assert prepared.pad_top == 80 and prepared.image.shape[:2] == (200, 800) and prepared.photo_shape == (40, 800)
    assert prepared.tensor.shape == (3, 736, 2944) and prepared.tensor.dtype == np.uint8  # BGR pixels, channels first


# --------------------------------------------------------------------------- boxes from the probability map


def _map(height=160, width=320) -> np.ndarray:
    probability = np.zeros((height, width), np.float32)
    probability[20:40, 30:150] = 0.9  # line 1, left
    probability[22:42, 180:300] = 0.8  # line 1, right (top 2 px lower: same line)
    probability[90:110, 40:200] = 0.95  # line 2
    probability[130:132, 10:60] = 0.9  # too thin: dropped
    probability[130:150, 250:300] = 0.4  # above thresh, below box_thresh: dropped
    return probability


def test_db_boxes_are_grown_scored_and_in_reading_order():
    found = detection.boxes_from_map(_map()[np.newaxis, np.newaxis], 160, 320, DET)
    assert len(found) == 3
    # the mean inside each box: the 2x2 dilation adds a row and a column of zero probability
    np.testing.assert_allclose(found.scores, [0.9 * 2400 / (21 * 121), 0.8 * 2400 / (21 * 121), 0.95 * 3200 / (21 * 161)], rtol=1e-5)
    tops = found.boxes[:, 0]
    assert tops[0, 0] < tops[1, 0] and tops[2, 1] > tops[1, 1]  # left to right on line 1, then line 2
    # the first: the contour's rectangle x 30..150, y 20..40 grown by 2400 x 1.6 / 280 = 13.7 px each side
    assert found.boxes[0].tolist() == [[16, 6], [164, 6], [164, 54], [16, 54]]
    assert found.boxes.dtype == np.float32 and found.boxes.shape == (3, 4, 2)


def test_boxes_scale_from_the_map_to_the_image_they_are_for():
    found = detection.boxes_from_map(_map(), 320, 640, DET)  # the map of an image twice its size
    assert found.boxes[0].tolist() == [[32, 12], [328, 12], [328, 108], [32, 108]]


def test_an_empty_map_finds_nothing():
    found = detection.boxes_from_map(np.zeros((64, 64), np.float32), 64, 64, DET)
    assert len(found) == 0 and found.boxes.shape == (0, 4, 2)


def test_reading_order_groups_lines_by_the_top_left_corner():
    boxes = np.array([[[50, 12]] * 4, [[10, 100]] * 4, [[5, 20]] * 4, [[90, 3]] * 4], np.float32)
    assert detection.reading_order(boxes, 10).tolist() == [2, 0, 3, 1]  # y 3, 12, 20 chain into one line (gaps < 10)


def test_order_clockwise_and_clip():
    box = detection.order_clockwise(np.array([[10, 50], [90, 10], [100, 40], [0, 20]], np.int32))
    assert box.tolist() == [[0, 20], [90, 10], [100, 40], [10, 50]]
    clipped = detection.clip_box(np.array([[-3.5, 2.7], [120.2, -1], [99.9, 80.6], [0, 79]], np.float32), 80, 100)
    assert clipped.tolist() == [[0, 2], [99, 0], [99, 79], [0, 79]]


def test_boxes_map_back_to_the_photo():
    prepared = detection.DetectionInput(np.zeros((3, 32, 32), np.float32), np.zeros((60, 100, 3), np.uint8), 2.0, 0.5, 10, (100, 40))
    mapped = detection.to_photo(np.array([[[10, 5], [90, 15], [90, 55], [10, 55]]], np.float32), prepared)
    assert mapped.tolist() == [[[5, 0], [40, 10], [40, 90], [5, 90]]]


# --------------------------------------------------------------------------- crops, direction, recognition input


def test_a_crop_is_the_box_warped_upright_and_a_tall_one_turned():
    image = np.zeros((100, 200, 3), np.uint8)
    image[20:40, 50:150] = (0, 0, 255)
    flat = recognition.crop(image, np.array([[50, 20], [150, 20], [150, 40], [50, 40]], np.float32))
    assert flat.shape == (20, 100, 3) and flat[2:-2, 2:-2, 2].min() == 255
    tall = recognition.crop(image, np.array([[60, 10], [80, 10], [80, 90], [60, 90]], np.float32))
    assert tall.shape == (20, 80, 3)  # 80 tall, 20 wide: a quarter turn counter-clockwise


def test_classifier_input_is_48_high_and_padded_to_192():
    crop = np.full((24, 60, 3), 255, np.uint8)
    values = recognition.classifier_input(crop, ClassifierSettings())
    assert values.shape == (3, 48, 192) and values.dtype == np.float32
    assert np.all(values[:, :, :120] == 1.0) and np.all(values[:, :, 120:] == 0.0)
    long = recognition.classifier_input(np.zeros((10, 500, 3), np.uint8), ClassifierSettings())
    assert np.all(long == -1.0)  # squeezed to 192


def test_directions_turn_only_confident_upside_down_crops():
    found = recognition.directions(np.array([[0.99, 0.01], [0.05, 0.95], [0.2, 0.8]], np.float32), ClassifierSettings())
    assert found.labels == ["0", "180", "180"] and found.flip.tolist() == [False, True, False]
    crops = [np.arange(6, dtype=np.uint8).reshape(1, 2, 3)] * 3
    turned = recognition.turned(crops, found.flip)
    assert turned[0] is crops[0] and turned[1].tolist() == crops[1][::-1, ::-1].tolist()


def test_reference_batches_follow_aspect_order_and_pad_to_the_widest():
    crops = [np.zeros((48, w, 3), np.uint8) for w in (600, 100, 48 * 10, 200, 300, 50, 700, 1000)]
    batches = recognition.reference_batches(crops, RecognitionSettings())
    assert [members for members, _ in batches] == [[5, 1, 3, 4, 2, 0], [6, 7]]
    assert [width for _, width in batches] == [600, 1000]
    narrow = recognition.reference_batches([np.zeros((48, 60, 3), np.uint8)], RecognitionSettings())
    assert narrow == [([0], 320)]


def test_bucket_widths():
    settings = RecognitionSettings()
    assert recognition.bucket_width(np.zeros((48, 100, 3), np.uint8), settings) == 320
    assert recognition.bucket_width(np.zeros((48, 321, 3), np.uint8), settings) == 480
    assert recognition.bucket_width(np.zeros((20, 400, 3), np.uint8), settings) == 960  # 48 x 20 = 960
    assert recognition.bucket_width(np.zeros((10, 5000, 3), np.uint8), settings) == 1920


def test_recognition_input_resizes_to_48_and_pads_right():
    values = recognition.recognition_input(np.full((24, 100, 3), 255, np.uint8), 480, RecognitionSettings())
    assert values.shape == (3, 48, 480) and np.all(values[:, :, :200] == 1.0) and np.all(values[:, :, 200:] == 0.0)


# --------------------------------------------------------------------------- CTC decoding


def _probabilities(tokens: list[int], classes: int, peak: float = 0.9) -> np.ndarray:
    out = np.full((len(tokens), classes), (1 - peak) / (classes - 1), np.float32)
    out[np.arange(len(tokens)), tokens] = peak
    return out


def test_ctc_merges_repeats_drops_blanks_and_scores_the_kept_steps():
    classes = recognition.characters("a\nb\nc")
    assert classes == ["blank", "a", "b", "c", " "]
    steps = _probabilities([0, 1, 1, 0, 1, 2, 2, 4, 3, 0], len(classes))
    steps[5, 2] = 0.8
    indices, scores = recognition.greedy_steps(np.stack([steps, _probabilities([0] * 10, 5)]))
    assert indices.dtype == np.int32 and indices[0].tolist() == [0, 1, 1, 0, 1, 2, 2, 4, 3, 0]
    (text, score), (empty, nothing) = recognition.ctc_decode(indices, scores, classes)
    assert text == "aab c" and score == round(float(np.mean([0.9, 0.9, 0.8, 0.9, 0.9])), 5)
    assert (empty, nothing) == ("", 0.0)


def test_greedy_steps_take_the_first_of_equal_classes():
    """As numpy's argmax and ONNX ArgMax (select_last_index 0): the recognizer's graph and this agree on ties."""
    tied = np.array([[[0.4, 0.4, 0.2], [0.1, 0.45, 0.45]]], np.float32)
    indices, scores = recognition.greedy_steps(tied)
    assert indices.tolist() == [[0, 1]] and scores[0].tolist() == pytest.approx([0.4, 0.45])


def test_ctc_refuses_a_character_list_of_another_size_and_mismatched_steps():
    with pytest.raises(ValueError, match="3 classes"):
        recognition.ctc_decode(np.array([[0, 4, 1]], np.int32), np.ones((1, 3), np.float32), ["blank", "a", " "])
    with pytest.raises(ValueError, match="must both be"):
        recognition.ctc_decode(np.zeros((1, 3), np.int32), np.ones((1, 4), np.float32), ["blank", "a", " "])


def test_the_model_s_list_is_split_into_lines():
    assert recognition.characters("x\n\u3000\ny") == ["blank", "x", "\u3000", "y", " "]
    assert recognition.characters(["x", "y"]) == ["blank", "x", "y", " "]


# --------------------------------------------------------------------------- the two stages with stand-in models


def _stand_in_models(lines: list[tuple[str, float]]):
    classes = recognition.characters("H\ni\n!")

    def detector(batch: np.ndarray) -> tuple[np.ndarray]:
        _, _, height, width = batch.shape
        probability = np.zeros((1, 1, height, width), np.float32)
        probability[0, 0, 100:140, 100:400] = 0.9
        probability[0, 0, 300:340, 100:300] = 0.9
        return (probability,)

    def recognizer(batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        steps = batch.shape[3] // 8
        out = []
        for text, peak in lines[: len(batch)]:
            tokens = [classes.index(ch) for ch in text] + [0] * (steps - len(text))
            out.append(_probabilities(tokens, len(classes), peak))
        return recognition.greedy_steps(np.stack(out))

    def classifier(batch: np.ndarray) -> tuple[np.ndarray]:
        return (np.tile(np.array([[0.99, 0.01]], np.float32), (len(batch), 1)),)

    return detector, recognizer, classifier, classes


def test_read_runs_both_stages_and_drops_empty_and_unsure_lines():
    photo = np.full((736, 736, 3), 200, np.uint8)
    detector, recognizer, classifier, classes = _stand_in_models([("Hi!", 0.95), ("H", 0.3)])
    lines = reader.read(photo, detector, recognizer, classes, classifier)
    assert [(line.text, line.score) for line in lines] == [("Hi!", 0.95)]
    assert lines[0].box.dtype == np.float32 and lines[0].box.shape == (4, 2) and 0.85 < lines[0].box_score < 0.9
    assert reader.read(photo, detector, recognizer, classes, classifier, batching="buckets")[0].text == "Hi!"


def test_read_needs_the_classifier_when_the_settings_use_it():
    detector, recognizer, _, classes = _stand_in_models([("Hi!", 0.95)] * 2)
    with pytest.raises(ValueError, match="classifier"):
        reader.read(np.zeros((736, 736, 3), np.uint8), detector, recognizer, classes)


def test_a_photo_without_text_reads_as_no_lines():
    def nothing(batch: np.ndarray) -> tuple[np.ndarray]:
        return (np.zeros((1, 1, *batch.shape[2:]), np.float32),)

    assert reader.read(np.zeros((100, 100, 3), np.uint8), nothing, nothing, ["blank", " "], nothing) == []


def test_the_settings_name_rapidocr_s_defaults():
    assert (DET.limit_side_len, DET.thresh, DET.box_thresh, DET.unclip_ratio, DET.max_candidates) == (736, 0.3, 0.5, 1.6, 1000)
    assert (DetectionSettings().min_side_len, DetectionSettings().max_side_len) == (30, 2000)
    assert (REC.height, REC.width, REC.batch, REC.text_score) == (48, 320, 6, 0.5)
    assert cv2.ROTATE_180 == 1  # the rotation code RapidOCR passes (cv2.rotate(img, 1))
