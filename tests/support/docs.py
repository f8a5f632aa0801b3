"""The user documentation (README.md and docs/*.md) read as data: its blocks, inline code, commands, flags,
measured figures and the committed results they name. Text in, text out: no product import here
(``tests/unit/test_docs.py`` holds what this finds to the code and configs that define it).

A document is cut into :class:`Block` s: headings, paragraphs, list items, table rows and code blocks. A table
row also carries its ``group``: the whole table with the paragraph just before it (its caption), which is where a
table says which result file its numbers come from; a list item, the paragraph before its list.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
ITEM = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s+")
ROW = re.compile(r"^\s*\|")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")

# Fenced blocks whose lines are shell (``console``: only the ``$ `` lines); a block without a language holds
# shell only where a line starts with a command (the others are output, diagrams or config snippets).
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
NON_SHELL_LANGUAGES = {"python", "toml", "json", "yaml", "pbtxt", "text"}
COMMAND_SEPARATORS = {"|", "||", "&&", ";", "&"}
ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")


@dataclass(frozen=True)
class Block:
    """One heading, paragraph, list item, table row or code block of a document."""

    doc: str  # the document's path in the repository
    line: int  # its first line
    kind: str  # heading, paragraph, item, row or code
    text: str
    heading: str  # the nearest heading above it ("" before the first)
    group: str  # a row's table with its caption; an item's list caption; a paragraph's own text
    language: str = ""  # a fenced code block's info string

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


# --------------------------------------------------------------------------- blocks


def indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def fenced_block(lines: list[str], start: int) -> tuple[str, str, int]:
    """(language, code, index after the closing fence) of the fence opened at ``start``."""
    opening = FENCE.match(lines[start])
    assert opening
    end = start + 1
    while end < len(lines) and not lines[end].strip().startswith(opening.group(1)):
        end += 1
    return opening.group(2).lower(), "\n".join(lines[start + 1 : end]), end + 1


def blocks(markdown: str, doc: str) -> list[Block]:
    """Every block of a Markdown document, in order."""
    lines = markdown.splitlines()
    found: list[Block] = []
    heading, caption, i = "", "", 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if FENCE.match(line):
            language, code, end = fenced_block(lines, i)
            found.append(Block(doc, i + 1, "code", code, heading, code, language))
            caption, i = "", end
        elif HEADING.match(line):
            heading = HEADING.match(line).group(1)  # type: ignore[union-attr]
            found.append(Block(doc, i + 1, "heading", heading, heading, heading))
            caption, i = "", i + 1
        elif ROW.match(line):
            end = i
            while end < len(lines) and ROW.match(lines[end]):
                end += 1
            group = "\n".join([caption, *lines[i:end]])
            found += [Block(doc, n + 1, "row", lines[n], heading, group) for n in range(i, end)]
            caption, i = "", end
        elif ITEM.match(line):
            items, i = list_items(lines, i, doc, heading)
            found += [Block(b.doc, b.line, b.kind, b.text, b.heading, caption, b.language) for b in items]
            caption = ""
        elif indent(line) >= 4:
            end = i
            while end < len(lines) and (indent(lines[end]) >= 4 or not lines[end].strip()):
                end += 1
            code = "\n".join(text[4:] for text in lines[i:end]).strip("\n")
            found.append(Block(doc, i + 1, "code", code, heading, code))
            caption, i = "", end
        else:
            end = i
            while end < len(lines) and lines[end].strip() and not starts_block(lines[end]):
                end += 1
            text = "\n".join(lines[i:end])
            found.append(Block(doc, i + 1, "paragraph", text, heading, text))
            caption, i = text, end
    return found


def starts_block(line: str) -> bool:
    return bool(FENCE.match(line) or HEADING.match(line) or ROW.match(line) or ITEM.match(line))


def list_items(lines: list[str], start: int, doc: str, heading: str) -> tuple[list[Block], int]:
    """The items of the list starting at ``start`` (and the code blocks inside them), and the index after it."""
    found: list[Block] = []
    current: list[str] = []
    first, content, i = start, 0, start

    def close() -> None:
        if current:
            found.append(Block(doc, first + 1, "item", "\n".join(current), heading, ""))
            current.clear()

    while i < len(lines):
        line = lines[i]
        item = ITEM.match(line)
        if item:
            close()
            first, content = i, item.end()
            current.append(line[content:])
            i += 1
        elif not line.strip():
            following = next((text for text in lines[i + 1 :] if text.strip()), "")
            if not following or (indent(following) < 2 and not ITEM.match(following)):
                break
            i += 1
        elif FENCE.match(line):
            language, code, end = fenced_block(lines, i)
            found.append(Block(doc, i + 1, "code", code, heading, "", language))
            i = end
        elif indent(line) >= content + 4 and not lines[i - 1].strip():
            end = i
            while end < len(lines) and (indent(lines[end]) >= content + 4 or not lines[end].strip()):
                end += 1
            code = "\n".join(text[content + 4 :] for text in lines[i:end]).strip("\n")
            found.append(Block(doc, i + 1, "code", code, heading, ""))
            i = end
        elif starts_block(line) and indent(line) < 2:
            break
        else:
            current.append(line.strip())
            i += 1
    close()
    return sorted(found, key=lambda block: block.line), i


# --------------------------------------------------------------------------- inline code and prose


def inline_code(text: str) -> list[str]:
    """The contents of a text's code spans (a span may cross a line: its newline reads as a space)."""
    return [" ".join(match.group(2).split()) for match in CODE_SPAN.finditer(text)]


def prose(text: str) -> str:
    """A text without its code spans."""
    return CODE_SPAN.sub(" ", text)


# --------------------------------------------------------------------------- commands


def shell_words(line: str) -> list[list[str]]:
    """The simple commands of a shell line (split at pipes, ``&&`` and ``;``), each as its words; a word's
    optional-argument brackets (``[--json]``) are dropped. A line shlex cannot split gives nothing."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="();|&")  # <placeholders> stay words
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return []
    commands: list[list[str]] = [[]]
    for word in words:
        if word in COMMAND_SEPARATORS:
            commands.append([])
        elif word.strip("[]()$"):
            commands[-1].append(word.strip("[]"))
    return [words for words in (without_environment(command) for command in commands) if words]


def without_environment(words: list[str]) -> list[str]:
    """A command's words without its leading ``NAME=value`` environment assignments."""
    while words and ENV_ASSIGNMENT.match(words[0]):
        words = words[1:]
    return words


def code_lines(block: Block) -> Iterator[str]:
    """A code block's shell lines: continuation lines joined, comments and ``$`` prompts dropped."""
    if block.language in NON_SHELL_LANGUAGES:
        return
    joined = re.sub(r"\\\n\s*", " ", block.text)
    for line in joined.splitlines():
        if block.language == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        yield re.sub(r"(^|\s)#.*$", "", line).strip()


def command_candidates(block: Block) -> list[list[str]]:
    """Every command a block may hold: each shell line of a code block, each code span of prose."""
    texts = list(code_lines(block)) if block.kind == "code" else inline_code(block.text)
    return [words for text in texts for words in shell_words(text) if words]


def flags(words: list[str]) -> list[str]:
    """The options a command's words pass: ``--name`` (``--name=value`` and ``--a/--b`` included) and ``-x``."""
    found = []
    for word in words:
        for part in word.split("/") if word.startswith("--") and "/--" in word else [word]:
            if re.match(r"^--?[A-Za-z]", part):
                found.append(part.split("=", 1)[0])
    return found


# --------------------------------------------------------------------------- figures and their sources

NUMBER = r"\d[\d,]*(?:\.\d+)?(?:e-?\d+)?"
RANGE = rf"{NUMBER}(?:\s*(?:–|-|to)\s*{NUMBER})?"
UNIT = (
    r"(?:CPU )?ms\b|req/s|img/s|images/s|photos/s|crops/s|items/s|MiB\b|GiB\b|MB\b|GB\b|KB\b|vCPUs?\b|%|(?<=\d)×(?!\s*\d)"
    r"|times\b|CPU-seconds|s \((?:pending|firing)\)"
)
METRIC = r"(?<![\w|])(?:cosine|IoU|agreement|overlap|accuracy|CER|p50|p95|p99|p-values?|p)\b|\|Δ[^|]*\|"
FIGURE = re.compile(
    rf"(?<![\w.])({RANGE})\s*(?:{UNIT})"  # 1.81×, 3.6 GiB, 40.6 req/s, 0.9 CPU ms, 12 % (not 64 × 64 or 2 × N: a size, a product)
    rf"|(?:{METRIC})\s*(?:≥|≤|<|>|=|~|about)?\s*({NUMBER})(?![\w.])"  # cosine 0.998, IoU ≥ 0.95, |Δ logits| 1.1e-5
    rf"|(?<![\w.])(\d+/\d+)\s+(?:lines|detections|photos|features|crops)",  # 59/60 lines
)
SOURCE = re.compile(r"(?:\.\./)?(benchmarks/results/[\w./*-]*|tests/[\w./-]+\.py)")


def figures(text: str) -> list[str]:
    """The measured figures of a text (outside its code spans): numbers with a unit of time, rate, size, CPU or
    ratio, or after a metric's name."""
    return [match.group(0).strip() for match in FIGURE.finditer(prose(text))]


def source_candidates(text: str) -> list[str]:
    """The repository paths of committed results (``benchmarks/results/...``) and tests (``tests/...py``) a text
    names, in code spans, links or prose."""
    return [match.group(1).rstrip(".") for match in SOURCE.finditer(text)]


def figure_numbers(text: str) -> list[tuple[str, str]]:
    """(figure, each number it states) of a text's figures: a range gives both ends, ``59/60 lines`` both counts,
    ``cosine 0.998`` the value (never the digits of a metric's name, ``p95``)."""
    found = []
    for match in FIGURE.finditer(prose(text)):
        stated = match.group(1) or match.group(2) or match.group(3) or ""
        for number in re.findall(r"\d[\d,]*(?:\.\d+)?(?:e-?\d+)?", stated):
            found.append((match.group(0).strip(), number))
    return found


SOURCE_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\d])")


def numbers_in(text: str) -> list[float]:
    """Every number of a text (thousands separators dropped), as a result file or a test states it."""
    return [float(value) for value in SOURCE_NUMBER.findall(re.sub(r"(?<=\d),(?=\d{3}\b)", "", text))]


def states(number: str, values: list[float], percent: bool = False) -> bool:
    """Whether one of ``values`` is ``number`` as the docs round it (to its own decimals; a percentage also of a
    fraction)."""
    plain = number.replace(",", "")
    decimals = len(plain.partition(".")[2]) if "e" not in plain else 12
    wanted = float(plain)
    scales = (1.0, 100.0) if percent else (1.0,)
    return any(abs(round(value * scale, decimals) - wanted) <= 10**-decimals / 2 + 1e-12 for value in values for scale in scales)


# --------------------------------------------------------------------------- documented examples


@dataclass(frozen=True)
class Shown:
    """One ``$`` command of a console example and what the doc shows it printing."""

    block: Block
    command: str
    output: str


def shown_commands(block: Block) -> list[Shown]:
    """Each command of a ``console`` block, with the lines up to the next command (continuation lines joined)."""
    if block.kind != "code" or block.language != "console":
        return []
    found: list[Shown] = []
    command, output = "", []
    for line in re.sub(r"\\\n\s*", " ", block.text).splitlines():
        if line.startswith("$ "):
            if command:
                found.append(Shown(block, command, "\n".join(output)))
            command, output = line[2:].strip(), []
        elif command:
            output.append(line)
    if command:
        found.append(Shown(block, command, "\n".join(output)))
    return found


def printed_blocks(blocks: list[Block]) -> list[tuple[Block, Block]]:
    """(a Python code block, the block the doc says it prints): a ``python`` block, then a paragraph ``prints``, then
    a code block."""
    found = []
    for first, said, printed in zip(blocks, blocks[1:], blocks[2:]):
        if first.kind == "code" and first.language == "python" and said.text.strip() == "prints" and printed.kind == "code":
            found.append((first, printed))
    return found


OUTPUT_TOKEN = re.compile(r"(\{\.\.\.\}|(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w]))")
NUMBER_GROUP = r"(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"


def same_output(shown: str, actual: str) -> bool:
    """Whether a program printed what the doc shows: the same text around the numbers (a run of spaces matching any
    run), integers equal, and each number with decimals within one unit of its last shown digit (a score's last digit
    moves with the CPU's floating point); an elided JSON object (``{...}``) stands for any object."""
    pattern, said = "", []
    for index, token in enumerate(OUTPUT_TOKEN.split(shown.strip())):
        if index % 2:
            if token == "{...}":
                pattern += r"\{.*?\}"
            else:
                pattern += NUMBER_GROUP
                said.append(token)
        else:
            pattern += "".join(r"\s+" if part.isspace() else re.escape(part) for part in re.split(r"(\s+)", token) if part)
    matched = re.fullmatch(pattern, actual.strip(), re.DOTALL)
    if not matched:
        return False
    for expected, got in zip(said, matched.groups()):
        decimals = expected.partition(".")[2].partition("e")[0]
        unit = 10.0 ** -len(decimals) * (10.0 ** int(expected.partition("e")[2]) if "e" in expected else 1.0)
        if abs(float(expected) - float(got)) > (unit * 1.01 if decimals else 0):
            return False
    return True


def message_pattern(shown: str) -> re.Pattern[str]:
    """A documented message as the pattern of what the code prints: ``...`` (or ``…``) and ``<placeholder>`` stand for
    any text, ``N``, ``M``, ``NAME``, ``X`` and ``Y`` for any word."""
    parts = re.split(r"(\.\.\.|…|<[\w ]+>|\b(?:N|M|NAME|X|Y)\b)", shown)
    pattern = ""
    for part in parts:
        if part in ("...", "…") or (part.startswith("<") and part.endswith(">")):
            pattern += ".*?"
        elif part in ("N", "M", "NAME", "X", "Y"):
            pattern += r"\S+?"
        else:
            pattern += re.escape(part)
    return re.compile(pattern, re.DOTALL)


# Where a documented command's output is produced from the code: the tier of the test that runs it.
# - integration (tests/integration/test_docs_examples.py): the clients and curl against the run's shared server;
#   tests/integration/test_bring_your_own_model.py: new-pipeline on the tests' own YOLO export, and refusing a model
#   that is no YOLO export;
# - unit (tests/unit/test_docs.py): the capacity planner on the committed measurements.
CLIENT_PROGRAMS = {"./scripts/classify", "./scripts/segment", "./scripts/detect", "./scripts/read-text", "scripts/curl_infer.sh", "head"}


def example_tier(command: str) -> str | None:
    """The tier whose test runs a documented command and compares its output with the doc's (None: no test does)."""
    commands = shell_words(command)
    words = commands[0] if commands else []
    if not words:
        return None
    if words[0] in CLIENT_PROGRAMS:
        return "integration"
    python = bool(re.fullmatch(r"(?:\S*/)?python3?", words[0]))
    if python and words[1:3] == ["-m", "benchmarks.capacity"]:
        return "unit"
    if python and words[1:4] == ["-m", "builders", "new-pipeline"] and "--from" in words and "yolo" in words:
        return "integration"
    return None
