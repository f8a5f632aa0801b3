"""The text reader's settings: RapidOCR 3.10.0's defaults, each with the file of the wheel that sets it.

Paths are inside the ``rapidocr`` 3.10.0 wheel (``rapidocr/...``). ``config.yaml`` is the
configuration ``RapidOCR()`` loads when given none; the rest are constants in the code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DetectionSettings:
    """Text detection (PP-OCRv6 small DB detector): its input and its postprocessing."""

    # config.yaml Global.min_side_len / max_side_len: the photo is first resized so that its sides
    # lie within these (utils/process_img.py resize_image_within_bounds), to multiples of 32.
    min_side_len: int = 30
    max_side_len: int = 2000
    # config.yaml Global.use_vertical_padding, min_height, width_height_ratio: a photo at most
    # min_height tall, or wider than width_height_ratio x its height, is padded with black rows
    # above and below (utils/process_img.py apply_vertical_padding).
    use_vertical_padding: bool = True
    min_height: int = 30
    width_height_ratio: float = 8
    # config.yaml Det.limit_side_len / limit_type "min": the shorter side is scaled up to
    # limit_side_len (never down), both sides then rounded to multiples of 32
    # (ch_ppocr_det/utils.py DetPreProcess.resize).
    limit_side_len: int = 736
    limit_type: str = "min"
    # config.yaml Det.mean / std, and ch_ppocr_det/utils.py DetPreProcess.scale = 1 / 255:
    # (pixel / 255 - mean) / std per channel, BGR order kept (utils/load_image.py hands BGR).
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    # config.yaml Det.thresh: probability map binarization threshold.
    thresh: float = 0.3
    # config.yaml Det.box_thresh: least mean probability inside a candidate box.
    box_thresh: float = 0.5
    # config.yaml Det.max_candidates: at most this many contours are considered.
    max_candidates: int = 1000
    # config.yaml Det.unclip_ratio: boxes grow by area x unclip_ratio / perimeter.
    unclip_ratio: float = 1.6
    # config.yaml Det.use_dilation: the binary map is dilated with a 2x2 kernel
    # (ch_ppocr_det/utils.py DBPostProcess.__init__).
    use_dilation: bool = True
    # config.yaml Det.score_mode "fast": a box's score is the mean probability inside the
    # quadrilateral (DBPostProcess.box_score_fast), not inside the contour ("slow").
    score_mode: str = "fast"
    # ch_ppocr_det/utils.py DBPostProcess.__init__: min_size = 3; a candidate's short side must be
    # at least min_size before growing and min_size + 2 after.
    min_size: int = 3
    # ch_ppocr_det/utils.py DBPostProcess.filter_det_res: a box of at most this width or height
    # (pixels, truncated) is dropped.
    min_box_side: int = 3
    # ch_ppocr_det/main.py _BOX_SORT_Y_THRESHOLD: boxes whose top-left corners are less than
    # this many pixels apart vertically (in y order) are on one line, read left to right.
    line_y_threshold: int = 10


@dataclass(frozen=True)
class ClassifierSettings:
    """Text direction (PP-OCRv4 mobile classifier ``ch_ppocr_mobile_v2.0_cls_mobile.onnx``)."""

    # ch_ppocr_cls/main.py CLS_SHAPE_BY_OCR_VERSION[PP-OCRv4] (config.yaml Cls.ocr_version): 3 x 48 x 192.
    height: int = 48
    width: int = 192
    # config.yaml Cls.cls_batch_num: crops per model call, in aspect-ratio order.
    batch: int = 6
    # config.yaml Cls.cls_thresh and label_list ["0", "180"]: a crop the model calls "180" with
    # more than this probability is turned upside down (cv2.rotate(img, 1), ch_ppocr_cls/main.py).
    thresh: float = 0.9
    labels: tuple[str, str] = ("0", "180")


@dataclass(frozen=True)
class RecognitionSettings:
    """Text recognition (PP-OCRv6 small CTC recognizer)."""

    # config.yaml Rec.rec_img_shape [3, 48, 320]: height 48; a batch is at least 320 wide
    # (ch_ppocr_rec/main.py: max_wh_ratio starts at 320 / 48).
    height: int = 48
    width: int = 320
    # config.yaml Rec.rec_batch_num: crops per model call, in aspect-ratio order; each batch is
    # padded to its widest crop (the batch decides the padding, so results depend on neighbours).
    batch: int = 6
    # config.yaml Global.text_score: lines whose mean character probability is below this are
    # dropped (main.py RapidOCR.filter_by_text_score).
    text_score: float = 0.5


@dataclass(frozen=True)
class ReaderSettings:
    detection: DetectionSettings = DetectionSettings()
    classifier: ClassifierSettings = ClassifierSettings()
    recognition: RecognitionSettings = RecognitionSettings()
    # config.yaml Global.use_cls: the direction classifier runs between detection and recognition.
    use_classifier: bool = True


DEFAULT = ReaderSettings()
