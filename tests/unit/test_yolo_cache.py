"""The tests' YOLO models are cached by what they are made of (tests/support/yolo.py, ``training_key``): the same
drawing of the dataset and the same options find the same model wherever the dataset was drawn; a changed file of
the dataset, or another option, trains another. (A drawing that changed from run to run would retrain every time.)"""

from __future__ import annotations

# The functions, not the module: a test module holding tests.support.yolo has the run train the detector (tests/conftest.py).
from tests.support.yolo import training_key, write_dataset

OPTIONS = ["--task", "detect", "--epochs", "40"]


def test_the_same_dataset_and_options_have_the_same_key_wherever_drawn(tmp_path):
    first, second = tmp_path / "a" / "dataset", tmp_path / "b" / "dataset"
    for root in (first, second):
        data = write_dataset(root)
        assert str(tmp_path) not in data.read_text()  # data.yaml names no folder: the dataset can move
    key = training_key(OPTIONS, first)
    assert training_key(OPTIONS, second) == key
    assert training_key([*OPTIONS[:-1], "39"], first) != key
    label = sorted((second / "labels" / "train").iterdir())[0]
    label.write_text(label.read_text().replace("0.", "0.1", 1))
    assert training_key(OPTIONS, second) != key
