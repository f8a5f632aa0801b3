"""The text reader's models: the three PP-OCR ONNX files inside the ``rapidocr`` 3.10.0 wheel, pinned by sha256.

RapidOCR (Apache-2.0) ships its default models inside its wheel, under the same license
(``MODEL_LICENSES.md`` in the wheel's ``.dist-info``); nothing is downloaded at run time. As the
MediaPipe pipelines take their ``.tflite`` files (:func:`builders.tflite.wheel_member`), the build
takes each file out of the wheel (downloaded once into ``.build/cache/wheels`` by pip, the release
the reference environment ``requirements/rapidocr.txt`` locks) into ``.build/cache/wheel-models``
and refuses bytes other than the pinned ones. The files are the ones ``rapidocr/config.yaml``
selects (``Det``/``Rec``: PP-OCRv6 small, ``Cls``: PP-OCRv4 mobile; their URLs and the same
sha256 are listed in the wheel's ``rapidocr/default_models.yaml``):

* ``detector``: DB text detection, ``x`` ``[N, 3, H, W]`` (H, W multiples of 32) -> ``fetch_name_0``
  ``[N, 1, H, W]`` text probability;
* ``recognizer``: CTC text recognition, ``x`` ``[N, 3, 48, W]`` -> ``fetch_name_0`` ``[N, W / 8,
  18710]`` class probabilities (softmax inside the graph);
* ``classifier``: text direction, ``x`` ``[N, 3, 48, 192]`` -> ``[N, 2]`` probabilities of 0 and 180 degrees.

The recognizer's character list is its own: the ONNX metadata key ``character``, one character a
line (18708 of them: :func:`model_characters`); the decoder puts the CTC blank before it and a
space after it (:func:`vision_serving.tasks.text_reading.recognition.characters`), RapidOCR's
``CTCLabelDecode`` (``rapidocr/ch_ppocr_rec/utils.py``) with the list read as
``rapidocr/inference_engine/onnxruntime/main.py`` reads it. (``rapidocr/ch_ppocr_rec/main.py``
falls back to a downloaded ``ppocr_keys_v1.txt`` only for engines whose model file carries no list.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builders import BuildError, Log
from builders.build_envs import ROOT
from builders.tflite import wheel_member

WHEEL = "rapidocr==3.10.0"
CACHE_DIR = ROOT / ".build" / "cache" / "wheel-models"
CHARACTER_KEY = "character"
CLASSES = 18710  # the recognizer's output classes: blank + 18708 characters + space


@dataclass(frozen=True)
class WheelModel:
    role: str
    member: str
    sha256: str
    description: str


MODELS: dict[str, WheelModel] = {
    model.role: model
    for model in (
        WheelModel(
            "detector",
            "rapidocr/models/PP-OCRv6_det_small.onnx",
            "090f04abcd9d9a7498bc4ebf677e4cb9bdce1fe4197ddb7e529f1ef44e1ff94f",
            "PP-OCRv6 small DB text detector (9.9 MB)",
        ),
        WheelModel(
            "recognizer",
            "rapidocr/models/PP-OCRv6_rec_small.onnx",
            "6f327246b50388f3c176ae304bd95767ea6dc0c9ae92153ef8cbe210b3c14884",
            "PP-OCRv6 small CTC text recognizer, multilingual (21.2 MB)",
        ),
        WheelModel(
            "classifier",
            "rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx",
            "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
            "PP-OCR mobile v2.0 text direction classifier, 0 / 180 degrees (0.6 MB)",
        ),
    )
}


def _quiet(message: str) -> None:
    pass


def model_file(role: str, log: Log = _quiet) -> Path:
    """The ONNX file of ``role`` (``detector``, ``recognizer``, ``classifier``), extracted from the wheel once."""
    if role not in MODELS:
        raise BuildError(f"no text reader model {role!r}; the roles are {', '.join(MODELS)}")
    model = MODELS[role]
    return wheel_member(WHEEL, model.member, model.sha256, log, cache=CACHE_DIR)


def model_characters(recognizer: Path) -> list[str]:
    """The recognizer's own character list: its ONNX metadata ``character``, split into lines as
    ``str.splitlines`` splits it (what RapidOCR's onnxruntime engine does)."""
    import onnx

    model = onnx.load(str(recognizer), load_external_data=False)
    metadata = {prop.key: prop.value for prop in model.metadata_props}
    if CHARACTER_KEY not in metadata:
        raise BuildError(f"{recognizer.name} carries no '{CHARACTER_KEY}' metadata: no character list for CTC decoding")
    return metadata[CHARACTER_KEY].splitlines()
