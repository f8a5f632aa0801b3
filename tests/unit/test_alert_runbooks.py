"""Every alert of k8s/prometheusrule.yaml has a summary, a description with label values and a
runbook_url into docs/runbooks.md of the repository named in pyproject.toml, whose section exists."""

from __future__ import annotations

import re
import tomllib

import yaml

from vision_serving import layout

RUNBOOKS_PATH = "/blob/main/docs/runbooks.md#"
# The stream service's alerts (their runbooks are docs/streams.md's, checked in tests/deploy/test_streams_deployment.py).
STREAM_RULE = layout.REPOSITORY_ROOT / "k8s" / "streams" / "prometheusrule.yaml"


def alerts() -> list[dict]:
    document = yaml.safe_load(layout.PROMETHEUS_RULE.read_text())
    return [rule for group in document["spec"]["groups"] for rule in group["rules"] if "alert" in rule]


def repository_url() -> str:
    project = tomllib.loads((layout.REPOSITORY_ROOT / "pyproject.toml").read_text())["project"]
    return project["urls"]["Repository"]


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def runbook_anchors() -> list[str]:
    headings = re.findall(r"^## (.+)$", layout.RUNBOOKS.read_text(), re.MULTILINE)
    return [github_anchor(heading) for heading in headings]


def test_github_anchor():
    assert github_anchor("VisionServingDown") == "visionservingdown"
    assert github_anchor("Queue p95: high (steps)") == "queue-p95-high-steps"


def test_every_alert_has_summary_description_and_a_runbook_url_that_resolves():
    base = repository_url() + RUNBOOKS_PATH
    assert base.startswith("https://github.com/")
    anchors = runbook_anchors()
    assert len(anchors) == len(set(anchors)), "duplicate runbook sections"
    found = []
    for rule in alerts():
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}, rule["alert"]
        assert annotations["summary"].strip() and len(annotations["description"]) > 80, rule["alert"]
        if not rule["expr"].startswith("absent("):  # absent() has no labels to tell
            assert "{{ $labels." in annotations["description"] and "{{ $value" in annotations["description"], rule["alert"]
        url = annotations["runbook_url"]
        assert url.startswith(base), f"{rule['alert']}: {url} is not under {base}"
        anchor = url.removeprefix(base)
        assert anchor in anchors, f"{rule['alert']}: docs/runbooks.md has no section #{anchor}"
        assert anchor == github_anchor(rule["alert"]), f"{rule['alert']}: its section is named after it"
        found.append(anchor)
    assert sorted(found) == sorted(anchors), "every runbook section belongs to an alert, and only one"


def test_runbook_links_inside_the_runbooks_resolve():
    anchors = set(runbook_anchors())
    for link in re.findall(r"\]\(#([^)]+)\)", layout.RUNBOOKS.read_text()):
        assert link in anchors, link


def test_the_rule_file_names_the_repository_only_through_its_runbook_urls():
    """A fork edits pyproject.toml and the rule files (the server's, the stream service's): no other copy of the URL in k8s/."""
    url = repository_url()
    text = layout.PROMETHEUS_RULE.read_text()
    assert text.count(url) == len(alerts())
    stream_alerts = [r for g in yaml.safe_load(STREAM_RULE.read_text())["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert STREAM_RULE.read_text().count(url) == len(stream_alerts)
    rule_files = (layout.PROMETHEUS_RULE, STREAM_RULE)
    others = [p for p in (layout.REPOSITORY_ROOT / "k8s").rglob("*") if p.is_file() and p not in rule_files and url in p.read_text()]
    assert not others, others
