"""Every relative link of every tracked Markdown file resolves: the file exists, and a ``#anchor`` names a
heading of its target as GitHub renders it (or an explicit HTML ``id``/``name``).

GitHub's heading ids: the heading's text (inline markup rendered: code spans keep their content, links their
text), lower-cased, every character but letters, digits, ``-``, ``_`` and spaces dropped, each space turned into
``-``; a heading whose id is already taken gets ``-1``, then ``-2``, ... Links inside code spans and fenced code
blocks are not links. External links (``https:``, ``mailto:``, ...) are not followed.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target "title") and ![alt](src): the text may hold one level of brackets (an image inside a link).
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]\\]|\\.|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
HTML_ID = re.compile(r"<[a-z][^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
INLINE_LINK_TEXT = re.compile(r"!?\[((?:[^\[\]\\]|\\.)*)\]\([^)]*\)")
HTML_TAG = re.compile(r"<[^>]+>")
UNDERSCORE_EMPHASIS = re.compile(r"(?<![\w\\])(_{1,2})(?=\S)(.+?)(?<=\S)\1(?!\w)")


def markdown_files(root: Path = ROOT) -> list[Path]:
    """The repository's tracked Markdown files (every ``*.md`` outside hidden and build folders without git)."""
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "*.md"], capture_output=True, check=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return sorted(p for p in root.rglob("*.md") if not any(part.startswith(".") for part in p.relative_to(root).parts))
    return sorted(root / name for name in listed.split("\0") if name and (root / name).is_file())


def prose_lines(markdown: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    lines, fence = [], ""
    for number, line in enumerate(markdown.splitlines(), 1):
        match = FENCE.match(line)
        if fence:
            if (
                match
                and match.group(1)[0] == fence[0]
                and len(match.group(1)) >= len(fence)
                and not line.strip()[len(match.group(1)) :].strip()
            ):
                fence = ""
            continue
        if match:
            fence = match.group(1)
            continue
        lines.append((number, line))
    return lines


def heading_text(raw: str) -> str:
    """A heading's text as GitHub renders it: code spans keep their content, links their text, no tags or emphasis."""
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), raw)
    text = INLINE_LINK_TEXT.sub(lambda m: m.group(1), text)
    text = HTML_TAG.sub("", text)
    text = UNDERSCORE_EMPHASIS.sub(lambda m: m.group(2), text)
    return re.sub(r"\\(.)", r"\1", text)


def github_slug(heading: str) -> str:
    """The id GitHub gives a heading's text (before duplicates are numbered)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(markdown: str) -> list[str]:
    """The texts of the document's ATX and setext headings, in order."""
    found, previous = [], ""
    for _, line in prose_lines(markdown):
        atx = ATX_HEADING.match(line)
        if atx:
            found.append(heading_text(atx.group(1) or ""))
            previous = ""
            continue
        if SETEXT_UNDERLINE.match(line) and previous.strip() and not re.match(r"^ {0,3}([-*+>|#]|\d+[.)])", previous):
            found.append(heading_text(previous.strip()))
            previous = ""
            continue
        previous = line
    return found


def anchors(markdown: str) -> set[str]:
    """Every id a link may name in the rendered document: numbered heading slugs, explicit HTML ids."""
    ids: set[str] = set()
    for text in headings(markdown):
        slug, count = github_slug(text), 0
        candidate = slug
        while candidate in ids:
            count += 1
            candidate = f"{slug}-{count}"
        ids.add(candidate)
    ids.update(match.group(1) for _, line in prose_lines(markdown) for match in HTML_ID.finditer(line))
    return ids


def link_targets(markdown: str) -> list[tuple[int, str]]:
    """(line number, target) of every inline link, image, reference definition and HTML href/src."""
    targets = []
    for number, line in prose_lines(markdown):
        prose = CODE_SPAN.sub("", line)
        found = [m.group(1) for m in INLINE_LINK.finditer(prose)]
        found += [m.group(1) for m in HTML_LINK.finditer(prose)]
        definition = REFERENCE_DEFINITION.match(prose)
        if definition:
            found.append(definition.group(1))
        targets += [(number, target.strip("<>")) for target in found]
    return targets


@cache
def anchors_of(path: Path) -> frozenset[str]:
    return frozenset(anchors(path.read_text(encoding="utf-8")))


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: target: why`` for every relative link of ``path`` that does not resolve."""
    problems = []
    where = path.relative_to(root)
    for number, target in link_targets(path.read_text(encoding="utf-8")):
        parts = urlsplit(target)
        if parts.scheme or target.startswith("//"):
            continue  # external: https:, mailto:, ...
        relative, fragment = unquote(parts.path), unquote(parts.fragment)
        base = root if relative.startswith("/") else path.parent  # /path: from the repository's root, as GitHub reads it
        resolved = (base / relative.lstrip("/")).resolve() if relative else path
        if resolved != root and root not in resolved.parents:
            problems.append(f"{where}:{number}: {target}: outside the repository")
            continue
        if not resolved.exists():
            problems.append(f"{where}:{number}: {target}: {resolved.relative_to(root)} does not exist")
            continue
        if fragment and resolved.is_file() and resolved.suffix.lower() == ".md" and fragment not in anchors_of(resolved):
            problems.append(f"{where}:{number}: {target}: {resolved.relative_to(root)} has no heading #{fragment}")
    return problems


def test_github_slug():
    assert github_slug("VisionServingDown") == "visionservingdown"
    assert github_slug("Queue p95: high (steps)") == "queue-p95-high-steps"
    assert github_slug("Sizing the CPU side: parallelism, pods and GPUs") == "sizing-the-cpu-side-parallelism-pods-and-gpus"
    assert github_slug("A → B") == "a--b"
    assert github_slug(heading_text("`face_detector`")) == "face_detector"
    assert github_slug(heading_text("Routing: [Gateway API](https://gateway-api.sigs.k8s.io/)")) == "routing-gateway-api"
    assert github_slug(heading_text("**Bold** and _emphasis_ in snake_case")) == "bold-and-emphasis-in-snake_case"


def test_duplicate_headings_are_numbered_and_code_is_not_a_heading():
    document = '# Setup\n\n## Setup\n\n```\n# Setup\n[x](missing.md)\n```\n\nSetup\n-----\n\n<a id="custom"></a>\n'
    assert anchors(document) == {"setup", "setup-1", "setup-2", "custom"}
    assert link_targets(document) == []


def test_a_broken_link_or_anchor_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## Two words\n")
    (tmp_path / "README.md").write_text(
        "# Read me\n\n"
        "[ok](docs/guide.md) [ok](docs/guide.md#two-words) [ok](#read-me) [ok](https://example.com/x.md#y) `[code](nowhere.md)`\n"
        "[gone](docs/missing.md) [no anchor](docs/guide.md#three-words) ![image](docs/img.png)\n"
        "[up](../outside.md)\n\n[ref]: docs/guide.md#nope\n"
    )
    problems = broken_links(tmp_path / "README.md", root=tmp_path)
    assert [problem.split(": ")[1] for problem in problems] == [
        "docs/missing.md",
        "docs/guide.md#three-words",
        "docs/img.png",
        "../outside.md",
        "docs/guide.md#nope",
    ], problems


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path):
    assert not broken_links(path), "\n".join(broken_links(path))
