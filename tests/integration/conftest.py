"""The integration tier's start: when the run includes the bring-your-own-model tests, the tests' YOLO
detector (tests/support/yolo.py) starts training at once, in the background, while the tests before
them run; their ``trained`` fixture waits for it (a cached detector is used as is)."""

from __future__ import annotations

import pytest

from tests.support import yolo

NEEDS_THE_DETECTOR = "test_bring_your_own_model.py"


def pytest_collection_finish(session: pytest.Session) -> None:
    if not session.config.option.collectonly and any(item.path.name == NEEDS_THE_DETECTOR for item in session.items):
        yolo.train_in_background()
