"""python -m scripts.rollout's arguments: the model rolled is the ensemble's core unless --model names another."""

from __future__ import annotations

import pytest

from devtools import rollout

calls: list[tuple[str, str]] = []


class Recorded:
    """Stands in for ``rollout.Rollout``: records what the command line asked for, contacts no server."""

    def __init__(self, url, model, version, golden, ensemble, *args, **kwargs) -> None:
        calls.append((model, ensemble))
        self.steps: list[dict] = []

    def run(self) -> int:
        return rollout.EXIT_OK


@pytest.mark.parametrize(
    "extra, model, ensemble",
    [
        ([], "image_classifier_core", "image_classifier"),
        (["--ensemble", "my_classifier"], "my_classifier_core", "my_classifier"),
        (["--ensemble", "my_classifier", "--model", "other_core"], "other_core", "my_classifier"),
    ],
)
def test_the_model_defaults_to_the_ensembles_core(tmp_path, monkeypatch, extra, model, ensemble):
    (tmp_path / "cat.jpg").write_bytes(b"\xff\xd8")
    monkeypatch.setattr(rollout, "Rollout", Recorded)
    calls.clear()
    assert rollout.main(["--version", "2", "--golden-dir", str(tmp_path), *extra]) == rollout.EXIT_OK
    assert calls == [(model, ensemble)]


def test_the_help_says_it_checks_classification_pipelines(capsys):
    with pytest.raises(SystemExit):
        rollout.main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "classification pipeline" in help_text and "top-1 LABELS" in help_text and "<--ensemble>_core" in help_text
