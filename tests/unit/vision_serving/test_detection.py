"""Unit tests for vision_serving.detection (MediaPipe face-detection pre/postprocessing).

The model outputs here are synthetic: raw regressor values are built from the
boxes they must decode to, so each test states MediaPipe's arithmetic
explicitly. Parity with MediaPipe's own runtime on real photos was checked
outside the test suite (it needs the mediapipe wheel and a TFLite runtime).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from vision_serving import detection as D

A = 896
ANCHORS = D.ssd_anchors()


# --------------------------------------------------------------------------- helpers


def raw_for(boxes: dict[int, tuple[float, float, float, float]], logits: dict[int, float], n_kp: int = 6):
    """Raw model outputs ``[1,A,16]``, ``[1,A,1]`` decoding to the given normalized (xc, yc, w, h) per anchor.

    Keypoint k of each box is put at (xc + 0.01 * k, yc - 0.01 * k). All other
    anchors get a logit of -20 (score ~2e-9).
    """
    raw = np.zeros((1, A, 16), np.float32)
    scores = np.full((1, A, 1), -20.0, np.float32)
    for i, (xc, yc, w, h) in boxes.items():
        ax, ay = ANCHORS[i, 0], ANCHORS[i, 1]  # fixed_anchor_size: anchor w = h = 1
        raw[0, i, :4] = [(xc - ax) * 128, (yc - ay) * 128, w * 128, h * 128]
        for k in range(n_kp):
            raw[0, i, 4 + 2 * k] = (xc + 0.01 * k - ax) * 128
            raw[0, i, 5 + 2 * k] = (yc - 0.01 * k - ay) * 128
        scores[0, i, 0] = logits[i]
    return raw, scores


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def xyxy(xc: float, yc: float, w: float, h: float) -> np.ndarray:
    return np.array([xc - w / 2, yc - h / 2, xc + w / 2, yc + h / 2], np.float32)


def reference_weighted_nms(boxes, keypoints, scores, threshold, iou_threshold):
    """Direct transcription of NonMaxSuppressionCalculator::WeightedNonMaxSuppression (one image)."""

    def iou(r1, r2):
        iw = min(r1[2], r2[2]) - max(r1[0], r2[0])
        ih = min(r1[3], r2[3]) - max(r1[1], r2[1])
        if iw <= 0 or ih <= 0:
            return 0.0
        inter = iw * ih
        norm = (r1[2] - r1[0]) * (r1[3] - r1[1]) + (r2[2] - r2[0]) * (r2[3] - r2[1]) - inter
        return inter / norm if norm > 0 else 0.0

    idx = [i for i in range(len(scores)) if scores[i] >= threshold]
    remained = sorted(idx, key=lambda i: -scores[i])
    out = []
    while remained:
        top = remained[0]
        cand = [i for i in remained if iou(boxes[i], boxes[top]) > iou_threshold]
        rest = [i for i in remained if i not in cand]
        if cand:
            wsum = sum(scores[i] for i in cand)
            box = sum(boxes[i] * scores[i] for i in cand) / wsum
            kp = sum(keypoints[i] * scores[i] for i in cand) / wsum
        else:
            box, kp = boxes[top], keypoints[top]
        out.append((box, kp, scores[top]))
        if len(rest) == len(remained):
            break
        remained = rest
    return out


# --------------------------------------------------------------------------- anchors


def test_anchor_count_and_known_values():
    assert ANCHORS.shape == (896, 4) and ANCHORS.dtype == np.float32
    # stride 8 -> 16x16 grid, 2 anchors per cell (aspect 1.0 + interpolated); strides 16,16,16
    # merged -> one 8x8 grid with 3 x 2 = 6 anchors per cell: 512 + 384.
    np.testing.assert_array_equal(ANCHORS[0], [0.5 / 16, 0.5 / 16, 1, 1])
    np.testing.assert_array_equal(ANCHORS[1], ANCHORS[0])
    np.testing.assert_array_equal(ANCHORS[2], [1.5 / 16, 0.5 / 16, 1, 1])
    np.testing.assert_array_equal(ANCHORS[511], [15.5 / 16, 15.5 / 16, 1, 1])
    np.testing.assert_array_equal(ANCHORS[512], [0.5 / 8, 0.5 / 8, 1, 1])
    np.testing.assert_array_equal(ANCHORS[517], ANCHORS[512])
    np.testing.assert_array_equal(ANCHORS[518], [1.5 / 8, 0.5 / 8, 1, 1])
    np.testing.assert_array_equal(ANCHORS[-1], [7.5 / 8, 7.5 / 8, 1, 1])


def reference_anchors(o: D.AnchorOptions) -> np.ndarray:
    """Per-anchor transcription of SsdAnchorsCalculator::GenerateAnchors."""

    def scale_of(i: int, n: int) -> float:
        return (o.min_scale + o.max_scale) * 0.5 if n == 1 else o.min_scale + (o.max_scale - o.min_scale) * i / (n - 1)

    out = []
    layer = 0
    n = len(o.strides)
    while layer < o.num_layers:
        ars, scs = [], []
        last = layer
        while last < n and o.strides[last] == o.strides[layer]:
            sc = scale_of(last, n)
            if last == 0 and o.reduce_boxes_in_lowest_layer:
                ars += [1.0, 2.0, 0.5]
                scs += [0.1, sc, sc]
            else:
                for ar in o.aspect_ratios:
                    ars.append(ar)
                    scs.append(sc)
                if o.interpolated_scale_aspect_ratio > 0:
                    nxt = 1.0 if last == n - 1 else scale_of(last + 1, n)
                    scs.append(math.sqrt(sc * nxt))
                    ars.append(o.interpolated_scale_aspect_ratio)
            last += 1
        fh = math.ceil(o.input_size_height / o.strides[layer])
        fw = math.ceil(o.input_size_width / o.strides[layer])
        for y in range(fh):
            for x in range(fw):
                for ar, sc in zip(ars, scs):
                    w, h = (1.0, 1.0) if o.fixed_anchor_size else (sc * math.sqrt(ar), sc / math.sqrt(ar))
                    out.append([(x + o.anchor_offset_x) / fw, (y + o.anchor_offset_y) / fh, w, h])
        layer = last
    return np.array(out, np.float32)


def test_anchors_match_reference_for_the_face_detector():
    np.testing.assert_allclose(ANCHORS, reference_anchors(D.AnchorOptions()), rtol=0, atol=1e-7)


def test_anchors_ssd_example_with_reduced_lowest_layer():
    # The example in ssd_anchors_calculator.cc (SSD MobileNet 300x300); TensorsToDetections'
    # example pairs it with num_boxes 1917 = 19*19*3 + (10*10 + 5*5 + 3*3 + 2*2 + 1) * 6.
    o = D.AnchorOptions(
        num_layers=6, min_scale=0.2, max_scale=0.95, input_size_height=300, input_size_width=300,
        strides=(16, 32, 64, 128, 256, 512), aspect_ratios=(1.0, 2.0, 0.5, 3.0, 0.3333),
        reduce_boxes_in_lowest_layer=True, fixed_anchor_size=False,
    )  # fmt: skip
    anchors = D.ssd_anchors(o)
    assert anchors.shape == (1917, 4)
    np.testing.assert_allclose(anchors, reference_anchors(o), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(anchors[:3, 2:], [[0.1, 0.1], [0.2 * 2**0.5, 0.2 / 2**0.5], [0.2 / 2**0.5, 0.2 * 2**0.5]], rtol=1e-6)


def test_anchor_options_validate():
    with pytest.raises(ValueError):
        D.AnchorOptions(num_layers=3)


# --------------------------------------------------------------------------- letterbox


def test_letterbox_params_pad_the_short_side():
    p = D.letterbox_params([240, 480, 300], [480, 240, 300], 128)
    np.testing.assert_array_equal(p.roi_width, [480, 480, 300])
    np.testing.assert_array_equal(p.roi_height, [480, 480, 300])
    np.testing.assert_array_equal(p.roi_left, [0, -120, 0])
    np.testing.assert_array_equal(p.roi_top, [-120, 0, 0])


def test_letterbox_params_non_square_target():
    p = D.letterbox_params([100], [100], (64, 128))  # (height, width): wider tensor pads horizontally
    assert (p.roi_width[0], p.roi_height[0], p.roi_left[0], p.roi_top[0]) == (200, 100, -50, 0)


def test_letterbox_round_trip_of_coordinates():
    p = D.letterbox_params([240, 600], [480, 512], 128)
    rng = np.random.default_rng(0)
    pixels = rng.uniform(0, 1, (2, 7, 2)).astype(np.float32) * np.array([[[480, 240]], [[512, 600]]], np.float32)
    np.testing.assert_allclose(p.to_pixels(p.to_normalized(pixels)), pixels, atol=1e-3)
    # the image's corners map to the tensor area outside the letterbox bars
    corners = p.to_normalized(np.array([[[0, 0], [480, 240]], [[0, 0], [512, 600]]], np.float32))
    np.testing.assert_allclose(corners[0], [[0, 0.25], [1, 0.75]], atol=1e-6)
    np.testing.assert_allclose(corners[1], [[(600 - 512) / 2 / 600, 0], [1 - (600 - 512) / 2 / 600, 1]], atol=1e-6)


def test_letterbox_image_content_and_border():
    image = np.full((64, 256, 3), 255, np.uint8)  # white, 4:1
    image[:, :128, 0] = 0  # left half: no red
    tensor, params = D.letterbox(image, 128)
    assert tensor.shape == (1, 128, 128, 3) and tensor.dtype == np.float32
    # 256 wide -> scale 0.5: the image fills rows 48..79, bars above and below are zero pixels = -1.0
    assert np.all(tensor[0, :47] == -1.0) and np.all(tensor[0, 81:] == -1.0)
    # 255 -> 255 * float32(2/255) - 1 rounded once (cv::Mat::convertTo), which is 1.0000001
    white = np.float32(255 * np.float64(np.float32(2 / 255)) - 1)
    assert white == np.nextafter(np.float32(1), np.float32(2))
    assert np.all(tensor[0, 50:78, :, 1] == white)
    assert np.all(tensor[0, 50:78, :60, 0] == -1.0) and np.all(tensor[0, 50:78, 68:, 0] == white)
    assert params.roi_top[0] == -96 and params.roi_width[0] == 256


def test_letterbox_batch_matches_single_and_accepts_rgba():
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((90, 200), (300, 120), (128, 128))]
    batch, params = D.letterbox_batch(images, 128)
    for i, image in enumerate(images):
        single, p = D.letterbox(image, 128)
        np.testing.assert_array_equal(batch[i], single[0])
        assert p.roi_left[0] == params.roi_left[i]
    rgba = np.concatenate([images[0], np.full((90, 200, 1), 7, np.uint8)], axis=2)
    np.testing.assert_array_equal(D.letterbox(rgba)[0], D.letterbox(images[0])[0])
    with pytest.raises(ValueError):
        D.letterbox(images[0].astype(np.float32))


# --------------------------------------------------------------------------- decode


def test_decode_boxes_keypoints_scores():
    raw, logits = raw_for({0: (0.2, 0.3, 0.1, 0.2), 700: (0.6, 0.55, 0.3, 0.25)}, {0: 2.0, 700: -1.0})
    boxes, kps, scores = D.decode(raw, logits)
    assert boxes.shape == (1, A, 4) and kps.shape == (1, A, 6, 2) and scores.shape == (1, A)
    np.testing.assert_allclose(boxes[0, 0], xyxy(0.2, 0.3, 0.1, 0.2), atol=1e-6)
    np.testing.assert_allclose(boxes[0, 700], xyxy(0.6, 0.55, 0.3, 0.25), atol=1e-6)
    np.testing.assert_allclose(kps[0, 700, 3], [0.63, 0.52], atol=1e-6)
    np.testing.assert_allclose(scores[0, [0, 700]], [1 / (1 + math.exp(-2)), 1 / (1 + math.exp(1))], rtol=1e-6)
    # anchor 5 has all-zero regressors: a zero-size box on its anchor center
    np.testing.assert_allclose(boxes[0, 5], ANCHORS[5, [0, 1, 0, 1]], atol=0)


def test_decode_clips_logits():
    raw = np.zeros((1, A, 16), np.float32)
    logits = np.zeros((1, A, 1), np.float32)
    logits[0, :4, 0] = [1000.0, -1000.0, 5.0, -5.0]
    _, _, scores = D.decode(raw, logits)
    # float32 exp overflows past |x| ~ 88, so +-100 already saturates to exactly 1 and 0
    assert scores[0, 0] == 1.0 and scores[0, 1] == 0.0
    assert scores[0, 2] == pytest.approx(1 / (1 + math.exp(-5)), rel=1e-6)
    clipped = D.decode(raw, logits, options=D.DecodeOptions(score_clipping_thresh=2.0))[2]
    np.testing.assert_allclose(clipped[0, :4], [1 / (1 + math.exp(-2)), 1 / (1 + math.exp(2))] * 2, rtol=1e-6)


def test_decode_yxhw_order():
    raw, logits = raw_for({10: (0.4, 0.7, 0.2, 0.1)}, {10: 3.0})
    swapped = raw.copy()
    swapped[..., 0::2], swapped[..., 1::2] = raw[..., 1::2], raw[..., 0::2]  # y first everywhere
    a = D.decode(raw, logits)
    b = D.decode(swapped, logits, options=D.DecodeOptions(reverse_output_order=False))
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-7)


# --------------------------------------------------------------------------- weighted NMS


def test_nms_merges_overlapping_with_score_weighted_average_and_keeps_disjoint():
    b1, b2, b3 = xyxy(0.30, 0.30, 0.20, 0.20), xyxy(0.32, 0.31, 0.20, 0.22), xyxy(0.75, 0.70, 0.15, 0.15)
    boxes = np.zeros((1, 5, 4), np.float32)
    boxes[0, :3] = [b2, b1, b3]
    kps = np.zeros((1, 5, 6, 2), np.float32)
    kps[0, 0], kps[0, 1], kps[0, 2] = 0.32, 0.30, 0.75
    scores = np.array([[0.6, 0.9, 0.7, 0.1, 0.2]], np.float32)
    out_b, out_k, out_s, counts = D.weighted_nms(boxes, kps, scores, 0.5, 0.3)
    assert counts.tolist() == [2] and out_b.shape == (1, 2, 4)
    np.testing.assert_allclose(out_s[0], [0.9, 0.7])  # the best one's own score, not an average
    np.testing.assert_allclose(out_b[0, 0], (0.9 * b1 + 0.6 * b2) / 1.5, atol=1e-6)
    np.testing.assert_allclose(out_k[0, 0], (0.9 * 0.30 + 0.6 * 0.32) / 1.5, atol=1e-6)
    np.testing.assert_allclose(out_b[0, 1], b3, atol=1e-7)
    np.testing.assert_allclose(out_k[0, 1], 0.75, atol=1e-7)


def test_nms_iou_threshold_is_strict_and_not_transitive():
    # b0 and b1 overlap with IoU 1/3 (> 0.3), b1 and b2 likewise, b0 and b2 not at all:
    # the cluster of the top box b0 takes b1 only; b2 survives on its own.
    boxes = np.array([[[0, 0, 2, 1], [1, 0, 3, 1], [2, 0, 4, 1]]], np.float32) / 4
    kps = np.zeros((1, 3, 6, 2), np.float32)
    scores = np.array([[0.9, 0.8, 0.7]], np.float32)
    _, _, s, counts = D.weighted_nms(boxes, kps, scores, 0.5, 0.3)
    assert counts.tolist() == [2] and s[0].tolist() == pytest.approx([0.9, 0.7])
    _, _, s, counts = D.weighted_nms(boxes, kps, scores, 0.5, 1 / 3 + 1e-6)
    assert counts.tolist() == [3]


def test_nms_matches_a_direct_transcription_of_mediapipe():
    rng = np.random.default_rng(7)
    n, a = 3, 60
    centers = rng.uniform(0.2, 0.8, (n, 5, 2))
    which = rng.integers(0, 5, (n, a))
    c = np.take_along_axis(centers, which[..., None], axis=1) + rng.normal(0, 0.02, (n, a, 2))
    wh = rng.uniform(0.1, 0.2, (n, a, 2))
    boxes = np.concatenate([c - wh / 2, c + wh / 2], -1).astype(np.float32)
    kps = rng.uniform(0, 1, (n, a, 6, 2)).astype(np.float32)
    scores = rng.uniform(0, 1, (n, a)).astype(np.float32)
    thresholds = np.array([0.5, 0.3, 0.8], np.float32)
    out_b, out_k, out_s, counts = D.weighted_nms(boxes, kps, scores, thresholds, 0.3)
    for i in range(n):
        ref = reference_weighted_nms(boxes[i].astype(np.float64), kps[i].astype(np.float64), scores[i], thresholds[i], 0.3)
        assert counts[i] == len(ref)
        for j, (rb, rk, rs) in enumerate(ref):
            np.testing.assert_allclose(out_b[i, j], rb, atol=1e-5)
            np.testing.assert_allclose(out_k[i, j], rk, atol=1e-5)
            assert out_s[i, j] == rs
        assert np.all(out_b[i, counts[i] :] == 0) and np.all(out_s[i, counts[i] :] == 0)


def test_nms_zero_detections():
    boxes, kps, scores = D.decode(*raw_for({}, {}))
    out_b, out_k, out_s, counts = D.weighted_nms(np.repeat(boxes, 2, 0), np.repeat(kps, 2, 0), np.repeat(scores, 2, 0))
    assert counts.tolist() == [0, 0]
    assert out_b.shape == (2, 0, 4) and out_k.shape == (2, 0, 6, 2) and out_s.shape == (2, 0)


def test_nms_max_detections_cap():
    spots = {i: (0.1 + 0.2 * (k % 5), 0.1 + 0.2 * (k // 5), 0.08, 0.08) for k, i in enumerate(range(520, 530))}
    raw, logits = raw_for(spots, {i: 1.0 + 0.1 * k for k, i in enumerate(spots)})
    boxes, kps, scores = D.decode(raw, logits)
    all_b, _, all_s, all_c = D.weighted_nms(boxes, kps, scores)
    assert all_c.tolist() == [10]
    capped_b, _, capped_s, capped_c = D.weighted_nms(boxes, kps, scores, max_detections=3)
    assert capped_c.tolist() == [3] and capped_b.shape == (1, 3, 4)
    np.testing.assert_array_equal(capped_s, all_s[:, :3])  # the best three
    np.testing.assert_array_equal(capped_b, all_b[:, :3])
    with pytest.raises(ValueError):
        D.weighted_nms(boxes, kps, scores, max_detections=0)


def test_nms_drops_negative_sizes_and_stops_at_a_degenerate_top_box():
    boxes = np.array([[[0.1, 0.1, 0.3, 0.3], [0.5, 0.5, 0.4, 0.7], [0.6, 0.6, 0.6, 0.6], [0.7, 0.1, 0.9, 0.3]]], np.float32)
    kps = np.zeros((1, 4, 6, 2), np.float32)
    # box 1 has a negative width (dropped by TensorsToDetectionsCalculator); box 2 has zero
    # area, so its IoU with itself is 0: MediaPipe emits it unchanged and stops there.
    scores = np.array([[0.9, 0.95, 0.8, 0.7]], np.float32)
    out_b, _, out_s, counts = D.weighted_nms(boxes, kps, scores)
    assert counts.tolist() == [2]
    np.testing.assert_allclose(out_s[0], [0.9, 0.8])
    np.testing.assert_array_equal(out_b[0, 1], boxes[0, 2])


# --------------------------------------------------------------------------- end to end


def test_postprocess_pixels_clipping_and_padding():
    # image 480 (w) x 240 (h): letterboxed to a 480x480 ROI, top bar of 120 px
    params = D.letterbox_params([240, 240], [480, 480], 128)
    face = (0.25, 0.5, 0.2, 0.2)  # normalized in the tensor
    edge = (0.95, 0.5, 0.2, 0.2)  # crosses the right border
    r1, s1 = raw_for({100: face, 800: edge}, {100: 3.0, 800: 2.0})
    r2, s2 = raw_for({}, {})
    det = D.postprocess(np.concatenate([r1, r2]), np.concatenate([s1, s2]), params)
    assert det.counts.tolist() == [2, 0] and det.boxes.shape == (2, 2, 4)
    np.testing.assert_allclose(det.boxes[0, 0], [72, 72 - 120 + 120, 168, 168], atol=1e-3)
    np.testing.assert_allclose(det.boxes[0, 1], [408, 72, 480, 168], atol=1e-3)  # x_max clipped at 480
    np.testing.assert_allclose(det.keypoints[0, 0, 2], [(0.27 * 480), (0.48 * 480) - 120], atol=1e-3)
    assert np.all(det.boxes[1] == 0) and np.all(det.keypoints[1] == 0) and np.all(det.scores[1] == 0)
    unclipped = D.postprocess(r1, s1, params.select(0), clip=False)
    assert unclipped.boxes[0, 1, 2] == pytest.approx(1.05 * 480, abs=1e-3)
    boxes, kps, scores = det.image(0)
    assert boxes.shape == (2, 4) and kps.shape == (2, 6, 2) and scores.shape == (2,)


def test_postprocess_batch_independence():
    params = D.letterbox_params([240, 512, 300], [480, 512, 451], 128)
    r1, s1 = raw_for(
        {100: (0.25, 0.5, 0.2, 0.2), 101: (0.26, 0.51, 0.21, 0.2), 800: (0.8, 0.5, 0.2, 0.2)},
        {100: 3.0, 101: 2.5, 800: 2.0},
    )
    r2, s2 = raw_for({300: (0.5, 0.5, 0.4, 0.4)}, {300: 1.0})
    r3, s3 = raw_for({}, {})
    raw, logits = np.concatenate([r1, r2, r3]), np.concatenate([s1, s2, s3])
    batch = D.postprocess(raw, logits, params)
    for i in range(3):
        alone = D.postprocess(raw[i : i + 1], logits[i : i + 1], params.select(i))
        for got, want in zip(batch.image(i), alone.image(0)):
            np.testing.assert_array_equal(got, want)
    assert batch.counts.tolist() == [2, 1, 0]


def test_postprocess_per_image_score_threshold():
    params = D.letterbox_params([128, 128], [128, 128], 128)
    r, s = raw_for({100: (0.25, 0.5, 0.2, 0.2)}, {100: logit(0.7)})
    det = D.postprocess(np.concatenate([r, r]), np.concatenate([s, s]), params, score_threshold=[0.5, 0.75])
    assert det.counts.tolist() == [1, 0]
    assert det.scores[0, 0] == pytest.approx(0.7, abs=1e-6)


# --------------------------------------------------------------------------- the served configuration


@pytest.fixture(scope="module")
def served_config():
    from vision_serving import layout, model_config

    return model_config.load_config(layout.pipeline("face_detector").model_dir("postprocess"))


def test_the_served_config_states_mediapipes_face_detection_options(served_config):
    spec = D.DetectorSpec.from_config(served_config)
    assert spec.decode == D.DecodeOptions() and spec.decode.anchors == D.AnchorOptions()
    assert spec.iou_threshold == D.IOU_THRESHOLD and spec.decode.min_score_thresh == D.SCORE_THRESHOLD
    assert spec.tensor_size == (D.INPUT_SIZE, D.INPUT_SIZE) and spec.max_detections == 100 and spec.clip
    tensors = D.DetectorTensors.from_config(served_config, spec)
    assert (tensors.raw_boxes, tensors.raw_scores, tensors.image_size, tensors.score_threshold) == (
        "REGRESSORS", "CLASSIFICATORS", "IMAGE_SIZE", "SCORE_THRESHOLD",
    )  # fmt: skip
    assert (tensors.boxes, tensors.scores, tensors.keypoints, tensors.count) == ("BOXES", "SCORES", "KEYPOINTS", "COUNT")


def test_spec_parameters_are_all_required_and_checked(served_config):
    # The drift monitor's parameters (drift_*) share the config; from_config leaves them out.
    parameters = {key: value.string_value for key, value in served_config.parameters.items() if not key.startswith("drift_")}
    assert D.DetectorSpec.from_parameters(parameters) == D.DetectorSpec.from_config(served_config)
    with pytest.raises(ValueError, match=r"missing detection parameter.*x_scale"):
        D.DetectorSpec.from_parameters({k: v for k, v in parameters.items() if k != "x_scale"})
    with pytest.raises(ValueError, match=r"unknown detection parameter.*nms"):
        D.DetectorSpec.from_parameters({**parameters, "nms": "x"})
    with pytest.raises(ValueError, match="min_suppression_threshold: could not convert"):
        D.DetectorSpec.from_parameters({**parameters, "min_suppression_threshold": "high"})
    with pytest.raises(ValueError, match="overlap_type"):
        D.DetectorSpec.from_parameters({**parameters, "overlap_type": "INTERSECTION_OVER_AREA"})
    with pytest.raises(ValueError, match="min_score_thresh must be in"):
        D.DetectorSpec.from_parameters({**parameters, "min_score_thresh": "1.5"})
    with pytest.raises(ValueError, match="anchors, num_boxes is 896"):
        D.DetectorSpec.from_parameters({**parameters, "aspect_ratios": "1.0,2.0"})


def test_detect_is_postprocess_through_the_letterbox_of_each_size():
    spec = D.DetectorSpec(D.DecodeOptions(), max_detections=2)
    r1, s1 = raw_for({100: (0.25, 0.5, 0.2, 0.2), 800: (0.8, 0.5, 0.2, 0.2), 300: (0.5, 0.2, 0.1, 0.1)}, {100: 3.0, 800: 2.0, 300: 1.0})
    r2, s2 = raw_for({}, {})
    raw, logits = np.concatenate([r1, r2]), np.concatenate([s1, s2])
    sizes = np.array([[240, 480], [600, 400]], np.int32)
    found = D.detect(raw, logits, sizes, spec, [0.5, 0.5], ANCHORS)
    expected = D.postprocess(raw, logits, D.letterbox_params([240, 600], [480, 400], 128), 0.5, max_detections=2)
    for got, want in zip(
        (found.boxes, found.keypoints, found.scores, found.counts), (expected.boxes, expected.keypoints, expected.scores, expected.counts)
    ):
        np.testing.assert_array_equal(got, want)
    assert found.counts.tolist() == [2, 0]  # three faces, capped at max_detections, best first
    np.testing.assert_allclose(found.scores[0], [1 / (1 + math.exp(-3)), 1 / (1 + math.exp(-2))], rtol=1e-6)


def test_take_pads_each_request_to_its_own_largest_count():
    params = D.letterbox_params([128] * 3, [128] * 3, 128)
    r1, s1 = raw_for({100: (0.25, 0.5, 0.2, 0.2), 800: (0.8, 0.5, 0.2, 0.2)}, {100: 3.0, 800: 2.0})
    r2, s2 = raw_for({}, {})
    r3, s3 = raw_for({300: (0.5, 0.5, 0.4, 0.4)}, {300: 1.0})
    found = D.postprocess(np.concatenate([r1, r2, r3]), np.concatenate([s1, s2, s3]), params)
    assert len(found) == 3 and found.boxes.shape == (3, 2, 4)
    first, rest, empty = found.take(0, 1), found.take(1, 3), found.take(1, 2)
    assert first.boxes.shape == (1, 2, 4) and first.counts.tolist() == [2]
    assert rest.boxes.shape == (2, 1, 4) and rest.keypoints.shape == (2, 1, 6, 2) and rest.scores.shape == (2, 1)
    assert rest.counts.tolist() == [0, 1] and np.all(rest.boxes[0] == 0) and rest.scores[0, 0] == 0
    np.testing.assert_array_equal(rest.boxes[1], found.boxes[2, :1])
    assert empty.boxes.shape == (1, 0, 4) and empty.keypoints.shape == (1, 0, 6, 2) and empty.counts.tolist() == [0]
    assert all(array.flags.c_contiguous for array in (rest.boxes, rest.keypoints, rest.scores))


def test_parse_score_threshold():
    np.testing.assert_array_equal(D.parse_score_threshold(None, 3, 0.5), [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(D.parse_score_threshold(np.array([[0.0], [1.0]], np.float32), 2, 0.5), [0.0, 1.0])
    for bad in ([[1.5]], [[-0.1]], [[math.nan]]):
        with pytest.raises(ValueError, match="SCORE_THRESHOLD must be in"):
            D.parse_score_threshold(np.array(bad, np.float32), 1, 0.5)
    with pytest.raises(ValueError, match="T must have one value per image"):
        D.parse_score_threshold(np.array([[0.5]], np.float32), 2, 0.5, "T")


def test_match_boxes_one_to_one_by_iou():
    a = np.array([[0, 0, 10, 10], [20, 0, 30, 10], [50, 50, 60, 60]], np.float32)
    b = np.array([[21, 0, 31, 10], [0, 0, 10, 11], [0, 0, 9, 9]], np.float32)
    matches = D.match_boxes(a, b)
    assert [(i, j) for i, j, _ in matches] == [(0, 1), (1, 0)]
    assert matches[0][2] == pytest.approx(100 / 110)
    assert D.match_boxes(a, np.zeros((0, 4))) == [] and D.match_boxes(a, b, min_iou=0.95) == []
    np.testing.assert_allclose(D.box_iou(a[:1], a[:1]), [[1.0]])
