"""Reading text in photos as RapidOCR 3.10.0 reads it: PP-OCR detection, then recognition of each line.

Plain computation (numpy and OpenCV; no Triton, no ONNX runtime), for the ``text_reader`` pipeline's
steps and for the tests that compare it with RapidOCR itself:

* :mod:`.settings`: RapidOCR's defaults, each with the file of its wheel that sets it;
* :mod:`.detection`: the DB detector's input from a photo, and text boxes (quadrilaterals in the
  photo's pixels, in reading order) from its probability map;
* :mod:`.offset`: the box growing RapidOCR does with pyclipper, without pyclipper;
* :mod:`.recognition`: crops cut upright, the direction classifier's input and decision, the CTC
  recognizer's input (RapidOCR's batches, or width buckets for a server) and greedy decoding;
* :mod:`.reader`: the two stages in one process, with the models as callables.

The models themselves are the ONNX files inside the ``rapidocr`` wheel, built into the ``text_reader`` pipeline (its recipe).
"""
