"""The mediapipe_ssd detection head: MediaPipe's SSD anchors, box decoding and weighted NMS, in numpy.

The model outputs here are synthetic: raw regressor values are built from the boxes they must
decode to, so each test states MediaPipe's arithmetic explicitly. Parity with MediaPipe's own
runtime on real photos is tests/integration/test_face_detector.py's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from vision_serving.tasks.detection_heads import mediapipe_ssd as D
from vision_serving.tasks.detection_heads.base import NmsSettings

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


# --------------------------------------------------------------------------- decode


def test_decode_boxes_keypoints_scores():
    raw, logits = raw_for({0: (0.2, 0.3, 0.1, 0.2), 700: (0.6, 0.55, 0.3, 0.25)}, {0: 2.0, 700: -1.0})
    boxes, kps, scores, _ = D.decode(raw, logits)
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
    _, _, scores, _ = D.decode(raw, logits)
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
    for x, y in zip(a[:3], b[:3]):
        np.testing.assert_allclose(x, y, atol=1e-7)


# --------------------------------------------------------------------------- weighted NMS


def test_nms_merges_overlapping_with_score_weighted_average_and_keeps_disjoint():
    b1, b2, b3 = xyxy(0.30, 0.30, 0.20, 0.20), xyxy(0.32, 0.31, 0.20, 0.22), xyxy(0.75, 0.70, 0.15, 0.15)
    boxes = np.zeros((1, 5, 4), np.float32)
    boxes[0, :3] = [b2, b1, b3]
    kps = np.zeros((1, 5, 6, 2), np.float32)
    kps[0, 0], kps[0, 1], kps[0, 2] = 0.32, 0.30, 0.75
    scores = np.array([[0.6, 0.9, 0.7, 0.1, 0.2]], np.float32)
    found = D.weighted_nms(boxes, kps, scores, None, 0.5, 0.3)
    out_b, out_k, out_s, counts = found.boxes, found.keypoints, found.scores, found.counts
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
    found = D.weighted_nms(boxes, kps, scores, None, 0.5, 0.3)
    s, counts = found.scores, found.counts
    assert counts.tolist() == [2] and s[0].tolist() == pytest.approx([0.9, 0.7])
    counts = D.weighted_nms(boxes, kps, scores, None, 0.5, 1 / 3 + 1e-6).counts
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
    found = D.weighted_nms(boxes, kps, scores, None, thresholds, 0.3)
    out_b, out_k, out_s, counts = found.boxes, found.keypoints, found.scores, found.counts
    for i in range(n):
        ref = reference_weighted_nms(boxes[i].astype(np.float64), kps[i].astype(np.float64), scores[i], thresholds[i], 0.3)
        assert counts[i] == len(ref)
        for j, (rb, rk, rs) in enumerate(ref):
            np.testing.assert_allclose(out_b[i, j], rb, atol=1e-5)
            np.testing.assert_allclose(out_k[i, j], rk, atol=1e-5)
            assert out_s[i, j] == rs
        assert np.all(out_b[i, counts[i] :] == 0) and np.all(out_s[i, counts[i] :] == 0)


def test_nms_zero_detections():
    boxes, kps, scores, _ = D.decode(*raw_for({}, {}))
    found = D.weighted_nms(np.repeat(boxes, 2, 0), np.repeat(kps, 2, 0), np.repeat(scores, 2, 0))
    out_b, out_k, out_s, counts = found.boxes, found.keypoints, found.scores, found.counts
    assert counts.tolist() == [0, 0]
    assert out_b.shape == (2, 0, 4) and out_k.shape == (2, 0, 6, 2) and out_s.shape == (2, 0)


def test_nms_max_detections_cap():
    spots = {i: (0.1 + 0.2 * (k % 5), 0.1 + 0.2 * (k // 5), 0.08, 0.08) for k, i in enumerate(range(520, 530))}
    raw, logits = raw_for(spots, {i: 1.0 + 0.1 * k for k, i in enumerate(spots)})
    boxes, kps, scores, _ = D.decode(raw, logits)
    every = D.weighted_nms(boxes, kps, scores)
    all_b, all_s, all_c = every.boxes, every.scores, every.counts
    assert all_c.tolist() == [10]
    capped = D.weighted_nms(boxes, kps, scores, max_detections=3)
    capped_b, capped_s, capped_c = capped.boxes, capped.scores, capped.counts
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
    found = D.weighted_nms(boxes, kps, scores)
    out_b, out_s, counts = found.boxes, found.scores, found.counts
    assert counts.tolist() == [2]
    np.testing.assert_allclose(out_s[0], [0.9, 0.8])
    np.testing.assert_array_equal(out_b[0, 1], boxes[0, 2])


def test_nms_keeps_each_clusters_best_class():
    boxes = np.array([[[0.1, 0.1, 0.3, 0.3], [0.11, 0.1, 0.31, 0.3], [0.6, 0.6, 0.8, 0.8]]], np.float32)
    kps = np.zeros((1, 3, 6, 2), np.float32)
    found = D.weighted_nms(boxes, kps, np.array([[0.6, 0.9, 0.8]], np.float32), np.array([[2, 1, 0]], np.int32))
    assert found.counts.tolist() == [2] and found.class_ids[0].tolist() == [1, 0]


def test_the_head_scales_to_the_model_inputs_pixels():
    head = D.MediaPipeSsdHead.from_parameters(PARAMETERS)
    raw, logits = raw_for({100: (0.25, 0.5, 0.2, 0.1)}, {100: 3.0})
    settings = NmsSettings(np.array([0.5], np.float32), np.array([0.3], np.float32), 10)
    found = head.detect({"regressors": raw, "classificators": logits}, settings)
    np.testing.assert_allclose(found.boxes[0, 0], np.array([0.15, 0.45, 0.35, 0.55]) * 128, atol=1e-3)
    assert found.keypoints is not None and found.keypoints.shape == (1, 1, 6, 2) and found.class_ids[0].tolist() == [0]
    assert head.check(128, 128) == [] and "128x128" in head.check(192, 192)[0]


def test_head_parameters_are_required_and_checked():
    assert D.MediaPipeSsdHead.from_parameters(PARAMETERS).decode_options == D.DecodeOptions()
    with pytest.raises(ValueError, match=r"missing parameter.*x_scale"):
        D.MediaPipeSsdHead.from_parameters({k: v for k, v in PARAMETERS.items() if k != "x_scale"})
    with pytest.raises(ValueError, match="overlap_type"):
        D.MediaPipeSsdHead.from_parameters({**PARAMETERS, "overlap_type": "INTERSECTION_OVER_AREA"})
    with pytest.raises(ValueError, match="x_scale: could not convert"):
        D.MediaPipeSsdHead.from_parameters({**PARAMETERS, "x_scale": "wide"})
    with pytest.raises(ValueError, match="anchors, num_boxes is 896"):
        D.MediaPipeSsdHead.from_parameters({**PARAMETERS, "aspect_ratios": "1.0,2.0"})


PARAMETERS = {
    "num_layers": "4", "min_scale": "0.1484375", "max_scale": "0.75", "input_size_height": "128", "input_size_width": "128",
    "anchor_offset_x": "0.5", "anchor_offset_y": "0.5", "strides": "8,16,16,16", "aspect_ratios": "1.0", "fixed_anchor_size": "true",
    "interpolated_scale_aspect_ratio": "1.0", "reduce_boxes_in_lowest_layer": "false", "num_classes": "1", "num_boxes": "896",
    "num_coords": "16", "box_coord_offset": "0", "keypoint_coord_offset": "4", "num_keypoints": "6", "num_values_per_keypoint": "2",
    "sigmoid_score": "true", "score_clipping_thresh": "100.0", "reverse_output_order": "true", "x_scale": "128.0", "y_scale": "128.0",
    "w_scale": "128.0", "h_scale": "128.0", "apply_exponential_on_box_size": "false", "nms_algorithm": "WEIGHTED",
    "overlap_type": "INTERSECTION_OVER_UNION",
}  # fmt: skip
