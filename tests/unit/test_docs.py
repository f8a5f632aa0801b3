"""The user documentation (README.md, docs/*.md) cannot drift from the code: every command, option, config key,
tensor name, alert name and default it names is held to what defines it, and every measured figure names the
committed result it comes from.

- **Commands** (shell lines of code blocks, code spans): ``./scripts/X`` exists; ``python -m M`` is a module
  here, and every option it is given is one its parser takes (with the subcommand's: ``python -m builders
  check --json``). The parsers are the real ones: each CLI's ``__main__`` runs in a subprocess until it parses
  its arguments (:data:`PROBE`), wherever the code builds them, so a parser that moves keeps being found.
- **Options in prose**: an option in a code span is one of a CLI the same paragraph, row or item, or its section
  heading, names; with no CLI named, of some CLI or script here. ``--flag (default X)`` is that parser's default.
- **Names in code spans**: a ``snake_case`` name is a key of a shipped config (pbtxt parameter or field,
  ``pipeline.toml``) or a name the code defines (grep); an ``UPPER_CASE`` one a tensor of a config or of a task's
  roles, or a name the code defines; a tensor column's names are tensors; a pipeline section's tensor table is
  its ensemble's inputs and outputs, datatypes and shapes; ``key value`` after a config key is a shipped value.
- **Paths** in commands and code spans that start at a top-level folder exist.
- **Alerts**: an alert-like name (``VisionServing...``, or a word ending like an alert) is an alert of
  ``k8s/prometheusrule.yaml`` (or the stream service's, ``k8s/streams/prometheusrule.yaml``); the alerts table's
  thresholds and durations are its rules'.
- **Figures** (a number with a unit of time, rate, size, CPU or ratio, or after a metric's name): its paragraph,
  row or item, its table with its caption, its list's caption, or its section heading names where it comes from:
  a committed result (``benchmarks/results/...``) or a test (``tests/...py``); a setting, the config or script
  that sets it; or it says plainly that no committed result backs it (:data:`UNBACKED`).

Every exception is in the lists right below, each with its reason.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml
from google.protobuf.message import Message

from tests.support import docs
from tests.support.docs import Block
from vision_serving import model_config

ROOT = docs.ROOT
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
HEAVY = ("onnx", "onnxruntime", "openvino", "onnx_graphsurgeon", "tensorrt")

# --------------------------------------------------------------------------- what is not ours to check

# Programs of other projects: their commands' words are theirs (paths given to them are still checked).
EXTERNAL_PROGRAMS = {
    "kubectl": "Kubernetes' CLI",
    "docker": "Docker's CLI",
    "tritonserver": "NVIDIA's server binary (its options are listed in EXTERNAL_OPTIONS)",
    "pip": "pip",
    "yolo": "Ultralytics' CLI",
    "apt-get": "Debian's package tool",
    "head": "coreutils",
    "echo": "the shell",
    "set": "the shell",
    "source": "the shell",
    "export": "the shell",
    "perf_analyzer": "NVIDIA's load generator",
    "nvidia-smi": "NVIDIA's driver tool",
}
# Modules of other projects run with ``python -m``.
EXTERNAL_MODULES = {"pytest": "the test runner (./scripts/test passes its arguments to pytest)"}
# Options of other programs the docs name in prose (or that ./scripts/serve passes on to tritonserver).
EXTERNAL_OPTIONS = {
    # tritonserver's own options, which ./scripts/serve and the server image's entrypoint pass on.
    "--model-config-name": "tritonserver",
    "--exit-on-error": "tritonserver",
    "--strict-readiness": "tritonserver",
    "--load-model": "tritonserver",
    # pytest's, given to ./scripts/test.
    "-m": "pytest",
    "-s": "pytest",
    "-k": "pytest",
}
# Names of other projects the docs name in code spans (nothing here defines them).
EXTERNAL_NAMES = {
    "container_cpu_cfs_throttled_seconds_total": "cAdvisor's metric, read on the node",
    "CANCELED": "a reason label Triton gives nv_inference_request_failure",
    "ModelInfer": "Triton's gRPC inference call",
    "CreateContainerConfigError": "a Kubernetes container status",
    "ImagePullBackOff": "a Kubernetes container status",
}
# Names the docs keep on purpose although nothing defines them any more.
HISTORICAL_NAMES = {
    "ImageClassifierDown": "the alert's name before the rename, in kubernetes.md's upgrade note",
    "image-classifier": "the namespace's name before the rename, in the upgrade notes",
}
# Example pipelines the docs create (docs/models.md): their paths exist once the reader runs the commands.
EXAMPLE_PIPELINES = {"my_classifier", "my_detector", "mine", "face_detector_full_range"}

# --------------------------------------------------------------------------- the facts: CLIs

PROBE = r"""
import argparse, importlib.util, json, runpy, sys, warnings
root, heavy, modules = sys.argv[1], set(json.loads(sys.argv[2])), sys.argv[3:]
sys.path.insert(0, root)


class Captured(BaseException):
    def __init__(self, parser, forwards):
        self.parser, self.forwards = parser, forwards


def capture(forwards):
    def parse(self, args=None, namespace=None):
        raise Captured(self, forwards)
    return parse


argparse.ArgumentParser.parse_args = capture(False)
argparse.ArgumentParser.parse_known_args = capture(True)  # a CLI that passes unknown options on


def plain(value):
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def described(action, parser):
    try:
        return (action.help or "") % dict(vars(action), prog=parser.prog)
    except (KeyError, TypeError, ValueError):
        return action.help or ""


def parsers(parser, prefix=""):
    found = {prefix: {flag: {"default": plain(action.default), "help": described(action, parser), "choices": plain(action.choices or [])}
                      for action in parser._actions for flag in action.option_strings}}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(parsers(sub, f"{prefix} {name}".strip()))
    return found


facts = {}
for module in modules:
    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError:
        found = False
    facts[module] = {"found": found, "parsers": None, "forwards": False, "error": ""}
    if not found:
        continue
    sys.argv = [module]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # runpy on a module its package imported
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        facts[module]["error"] = "ran to its end without parsing arguments"
    except Captured as captured:
        facts[module].update(parsers=parsers(captured.parser), forwards=captured.forwards)
    except BaseException as error:
        facts[module]["error"] = f"{type(error).__name__}: {error}"
print("\nPROBE " + json.dumps({"clis": facts, "heavy": sorted({m.split('.')[0] for m, v in sys.modules.items() if v is not None} & heavy)}))
"""


class Cli(NamedTuple):
    """A command-line program of this repository, as its parser says."""

    module: str
    found: bool
    parsers: dict[str, dict[str, dict]]  # subcommand ("" the program itself) -> option -> default, help
    forwards: bool = False  # parses known arguments and passes the others on
    error: str = ""

    def subcommands(self) -> list[str]:
        return [name for name in self.parsers if name]

    def options(self, subcommand: str = "") -> dict[str, dict]:
        """The options of the program and of a subcommand ("*": of any)."""
        if subcommand == "*":
            return {flag: option for options in self.parsers.values() for flag, option in options.items()}
        return {**self.parsers.get("", {}), **self.parsers.get(subcommand, {})}

    def all_options(self) -> set[str]:
        return {flag for options in self.parsers.values() for flag in options}


def probe(modules: Iterable[str]) -> tuple[dict[str, Cli], list[str]]:
    """Each module's parsers (built by running it until it parses its arguments), and the heavy libraries that
    imported."""
    completed = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT), json.dumps(HEAVY), *sorted(set(modules))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    last = completed.stdout.rpartition("\nPROBE ")[2]
    assert completed.returncode == 0 and last, completed.stderr[-3000:]
    found = json.loads(last)
    clis = {name: Cli(name, fact["found"], fact["parsers"] or {}, fact["forwards"], fact["error"]) for name, fact in found["clis"].items()}
    return clis, found["heavy"]


def script_module(path: Path) -> str | None:
    """The module a shell wrapper runs (``exec .../python -m MODULE "$@"``), if it is one."""
    found = re.search(r"^\s*exec\s+\S*python\S*\s+-m\s+([\w.]+)", path.read_text(errors="replace"), re.MULTILINE)
    return found.group(1) if found else None


def installed_scripts() -> dict[str, str]:
    """Programs an image installs from this repository (``COPY docker/x.sh /usr/local/bin/x``): name -> path."""
    found = {}
    for dockerfile in (ROOT / "docker").glob("*Dockerfile"):
        for source, target in re.findall(r"^COPY\s+(?:--\S+\s+)*(\S+)\s+/usr/(?:local/)?bin/(\S+)", dockerfile.read_text(), re.MULTILINE):
            found[target] = source
    return found


# --------------------------------------------------------------------------- the facts: configs, code, alerts


def tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True, text=True, check=True
    ).stdout
    return sorted({ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()})


def defines(path: Path) -> bool:
    """Whether a file is code or config that may define a name the docs use (not docs, results or these tests)."""
    relative = path.relative_to(ROOT).as_posix()
    if path.suffix in {".md", ".png", ".jpg", ".onnx", ".txt"} or relative.startswith("benchmarks/results/"):
        return False
    return not re.search(r"tests/.*docs", relative)


def pbtxt_fields(message: Message, found: dict[str, set[str]]) -> None:
    """Every field name of a config (recursively) and its values; parameters as their keys."""
    for descriptor, value in message.ListFields():
        if descriptor.name == "parameters":
            for key, parameter in value.items():
                found.setdefault(key, set()).add(parameter.string_value)
            continue
        values = value if descriptor.label == descriptor.LABEL_REPEATED else [value]
        for item in values:
            if isinstance(item, Message):
                pbtxt_fields(item, found)
            else:
                found.setdefault(descriptor.name, set()).add(str(item).lower() if isinstance(item, bool) else str(item))


def toml_keys(table: dict, found: dict[str, set[str]]) -> None:
    for key, value in table.items():
        if isinstance(value, dict):
            found.setdefault(key, set())
            toml_keys(value, found)
        else:
            found.setdefault(key, set()).add(str(value).lower() if isinstance(value, bool) else str(value))


class Facts(NamedTuple):
    """What the code and configs define, gathered once."""

    clis: dict[str, Cli]
    heavy: list[str]
    words: set[str]  # every identifier of the code and configs
    text: str  # the code and configs, for names that are not identifiers
    config_values: dict[str, set[str]]  # config key -> its shipped values (pbtxt, pipeline.toml, templates in code)
    code_defaults: dict[str, set[str]]  # config key -> the defaults the code reads it with
    tensors: set[str]
    ensembles: dict[str, dict[str, tuple[str, str, list[int]]]]  # pipeline -> tensor -> direction, datatype, dims
    alerts: dict[str, str]  # alert -> its expr and for
    installed: dict[str, str]  # program an image installs -> its script
    script_flags: set[str]  # the options the shell scripts here take

    def cli(self, module: str) -> Cli | None:
        return self.clis.get(module)


def doc_blocks(paths: Iterable[Path] = DOCUMENTS) -> list[Block]:
    return [block for path in paths for block in docs.blocks(path.read_text(), path.relative_to(ROOT).as_posix())]


def python_modules(blocks: Iterable[Block]) -> set[str]:
    """Every module the blocks run with ``python -m`` and every module a script they run wraps."""
    modules = set()
    for block in blocks:
        for words in docs.command_candidates(block):
            if is_python(words[0]) and len(words) > 2 and words[1] == "-m":
                modules.add(words[2])
    for path in (ROOT / "scripts").iterdir():
        module = script_module(path) if path.is_file() and not path.suffix else None
        if module:
            modules.add(module)
    return modules - set(EXTERNAL_MODULES)


def is_python(word: str) -> bool:
    return bool(re.fullmatch(r"(?:\S*/)?python3?(?:\.\d+)?", word))


@cache
def facts() -> Facts:
    files = tracked_files()
    defining = [path for path in files if defines(path)]
    text = (
        "\n".join(path.read_text(errors="replace") for path in defining) + "\n" + "\n".join(p.relative_to(ROOT).as_posix() for p in files)
    )
    clis, heavy = probe(python_modules(doc_blocks()))
    config_values: dict[str, set[str]] = {}
    ensembles: dict[str, dict[str, tuple[str, str, list[int]]]] = {}
    tensors: set[str] = set()
    for path in sorted((ROOT / "model_repository").rglob("*.pbtxt")):
        config = model_config.parse_config_text(path.read_text(), str(path))
        pbtxt_fields(config, config_values)
        for kind, group in (("input", config.input), ("output", config.output)):
            tensors.update(tensor.name for tensor in group)
            if path.name == "config.pbtxt" and path.parent.name == path.parent.parent.name:  # the ensemble
                ensembles.setdefault(config.name, {}).update(
                    {t.name: (kind, model_config.dtype_name(t.data_type), [int(d) for d in t.dims]) for t in group}
                )
    for path in sorted((ROOT / "model_repository").glob("*/pipeline.toml")):
        toml_keys(tomllib.loads(path.read_text()), config_values)
    for key, value in re.findall(r'key:\s*"(\w+)",\s*value:\s*\{+\s*string_value:\s*"([^"{}]*)"', text):  # config templates in code
        config_values.setdefault(key, set()).add(value)
    code_defaults: dict[str, set[str]] = {}
    for key, value in re.findall(r'parameter\([^,()]+,\s*"(\w+)",\s*"?([\w.-]+)"?\)', text):
        code_defaults.setdefault(key, set()).add(value)
    tensors.update(re.findall(r'Role\((?:[^()]|\([^()]*\))*?\bname="([A-Z][A-Z0-9_]*)"', text))  # dims in the call: (1,)
    # The server's alerts and the stream service's (k8s/streams/prometheusrule.yaml).
    rule_files = (ROOT / "k8s" / "prometheusrule.yaml", ROOT / "k8s" / "streams" / "prometheusrule.yaml")
    alerts = {
        rule["alert"]: f"{rule['expr']} for: {rule.get('for', '')}"
        for rules in (yaml.safe_load(path.read_text()) for path in rule_files)
        for group in rules["spec"]["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    return Facts(
        clis=clis,
        heavy=heavy,
        words=set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)),
        text=text,
        config_values=config_values,
        code_defaults=code_defaults,
        tensors=tensors,
        ensembles=ensembles,
        alerts=alerts,
        installed=installed_scripts(),
        script_flags={flag for path in shell_scripts() for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", path.read_text())},
    )


def shell_scripts() -> list[Path]:
    return [
        path for path in [*(ROOT / "scripts").iterdir(), *(ROOT / "docker").glob("*.sh")] if path.suffix in {"", ".sh"} and path.is_file()
    ]


# --------------------------------------------------------------------------- commands


class Command(NamedTuple):
    """A command of the docs, resolved: a module's CLI (``cli``), a shell script (``script``), another project's
    program (``external``) or a script that does not exist (``missing``)."""

    block: Block
    words: tuple[str, ...]
    kind: str
    target: str  # the module, the script's path or the program
    arguments: tuple[str, ...]


def aliases(known: Facts) -> dict[str, tuple[str, tuple[str, ...]]]:
    """How prose names a CLI without ``python -m``: ``builders all``, ``benchmarks.steps``, ``systems --quick``,
    a builders step (``new-pipeline --from yolo``): word -> module and the words it stands for."""
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    for module in sorted(known.clis, key=lambda name: (-len(name), name)):  # the shortest module wins a name
        cli = known.clis[module]
        found[module] = (module, ())
        found[module.rpartition(".")[2]] = (module, ())
        found.update({name: (module, (name,)) for name in cli.subcommands() if " " not in name})
    return found


def resolve(block: Block, words: list[str], known: Facts, by_alias: bool) -> Command | None:
    """What a command's first words run, or None when they are not a command."""
    program, rest = words[0], tuple(words[1:])
    if is_python(program):
        if len(words) > 2 and words[1] == "-m":
            kind = "external" if words[2] in EXTERNAL_MODULES else "cli"
            return Command(block, tuple(words), kind, words[2], tuple(words[3:]))
        return None
    script = re.fullmatch(r"(?:\./)?((?:scripts|docker)/[\w-]+(?:\.sh)?)", program)  # not a Dockerfile or compose.yaml
    if script:
        path = ROOT / script.group(1)
        if not path.is_file():
            return Command(block, tuple(words), "missing", script.group(1), rest)
        module = script_module(path)
        if module:
            return Command(block, tuple(words), "external" if module in EXTERNAL_MODULES else "cli", module, rest)
        return Command(block, tuple(words), "script", script.group(1), rest)
    if program in known.installed:
        return Command(block, tuple(words), "script", known.installed[program], rest)
    if program in EXTERNAL_PROGRAMS:
        return Command(block, tuple(words), "external", program, rest)
    named = aliases(known).get(program)
    if named and by_alias and any(word.startswith("-") for word in rest):
        return Command(block, tuple(words), "cli", named[0], named[1] + rest)
    return None


def commands(blocks: Iterable[Block], known: Facts) -> list[Command]:
    found = []
    for block in blocks:
        for words in docs.command_candidates(block):
            command = resolve(block, words, known, by_alias=block.kind != "code")
            if command:
                found.append(command)
    return found


def subcommand(cli: Cli, arguments: Iterable[str]) -> str:
    """The subcommand the arguments name ("" none; "*" a ``<placeholder>`` for any)."""
    arguments = list(arguments)
    named = next((word for word in arguments if word in cli.subcommands()), "")
    return named or ("*" if cli.subcommands() and any(re.fullmatch(r"<\w+>", word) for word in arguments) else "")


def kubectl_names(arguments: Iterable[str]) -> list[str]:
    """The objects a kubectl command names: its namespace (``-n NAME``) and ``KIND/NAME`` (not placeholders)."""
    arguments, found = list(arguments), []
    for before, word in zip(["", *arguments], arguments):
        if before in {"-n", "--namespace"}:
            found.append(word)
        elif re.fullmatch(r"[a-z]+/[a-z][\w-]*", word) and not word.startswith("k8s/"):
            found.append(word.partition("/")[2])
    return found


def k8s_defines(name: str, known: Facts) -> bool:
    return name in HISTORICAL_NAMES or bool(re.search(rf"\b(?:name|namespace): {re.escape(name)}\b", known.text))


def command_problems(blocks: list[Block], known: Facts) -> list[str]:
    """Each command's program exists, each option it is given is one its parser takes, and each object a kubectl
    command names is one the manifests define."""
    problems = []
    for command in commands(blocks, known):
        where, shown = command.block.where, " ".join(command.words)
        if command.kind == "missing":
            problems.append(f"{where}: {shown}: {command.target} does not exist")
        elif command.kind == "script":
            script = (ROOT / command.target).read_text(errors="replace")
            problems += [
                f"{where}: {shown}: {command.target} has no {flag}" for flag in docs.flags(command.arguments) if flag not in script
            ]
        elif command.kind == "external" and command.target == "kubectl":
            problems += [
                f"{where}: {shown}: k8s/ names no {name}" for name in kubectl_names(command.arguments) if not k8s_defines(name, known)
            ]
        elif command.kind == "cli":
            cli = known.cli(command.target)
            if cli is None or not cli.found:
                problems.append(f"{where}: {shown}: no module {command.target}")
            elif not cli.parsers:
                problems.append(f"{where}: {shown}: {command.target} has no parser ({cli.error})")
            else:
                options = cli.options(subcommand(cli, command.arguments))
                for flag in docs.flags(command.arguments):
                    if flag not in options and not (cli.forwards and flag in EXTERNAL_OPTIONS):
                        problems.append(f"{where}: {shown}: {command.target} takes no {flag}")
    return problems


# --------------------------------------------------------------------------- options in prose


def named_clis(text: str, block: Block, known: Facts) -> tuple[list[tuple[Cli, str]], bool]:
    """The CLIs (with a subcommand) a text names in its code spans (commands, or a CLI's short name alone), and
    whether it names another project's program too."""
    found, external = [], False
    table = aliases(known)
    for span in docs.inline_code(text):
        for words in docs.shell_words(span):
            command = resolve(block, words, known, by_alias=True)
            if command and command.kind == "cli" and known.cli(command.target):
                cli = known.clis[command.target]
                found.append((cli, subcommand(cli, command.arguments)))
            external = external or bool(command and command.kind == "external")
        if span in table:
            module, sub = table[span]
            found.append((known.clis[module], sub[0] if sub else ""))
    return found, external


def prose_options(block: Block) -> list[tuple[str, str]]:
    """(option, its code span) of every code span of a block's prose that starts with an option (``--pipeline
    NAME``, ``--grpc-url/--http-url``); a span that is a command is checked as one."""
    if block.kind == "code":
        return []
    spans = [span for span in docs.inline_code(block.text) if span.startswith("-")]
    return [(flag, span) for span in spans for words in docs.shell_words(span)[:1] for flag in docs.flags(words)]


def context_clis(block: Block, known: Facts) -> tuple[list[tuple[Cli, str]], bool]:
    """The CLIs the options of a block belong to: those the block or its heading name (none: any CLI), and whether
    it names another project's program (whose options are not ours to know)."""
    in_block, external = named_clis(block.text, block, known)
    in_heading, _ = named_clis(block.heading, block, known)
    return in_block + in_heading, external


def option_problems(blocks: list[Block], known: Facts) -> list[str]:
    """Each option prose names is one of the CLI it is said of (else of some CLI here, or of another program)."""
    problems = []
    every = {flag for cli in known.clis.values() for flag in cli.all_options()} | known.script_flags
    for block in blocks:
        for flag, span in prose_options(block):
            context, external = context_clis(block, known)
            allowed = {option for cli, sub in context for option in cli.options(sub)} if context else every
            if flag not in allowed and flag not in EXTERNAL_OPTIONS and not external:
                said = ", ".join(sorted({cli.module + (f" {sub}" if sub else "") for cli, sub in context})) or "any CLI"
                problems.append(f"{block.where}: `{span}`: {flag} is not an option of {said}")
    return problems


# ``--flag` (default X)``, ``--flag` (X)``, ``--flag`, default X``, ``--flag` seconds (default X)``,
# ``--flag` × stable's (default X)``.
DEFAULT_AFTER = r"`(?:\s*[\w'×]+){0,2}\s*(?:\(\s*(?:default:?\s*)?|,\s*default:?\s*)(`[^`]+`|-?\d[\d.]*|all\b|none\b)"


def same_value(said: str, option: dict) -> bool:
    """Whether a value the docs give is a parser's default (or, for a default computed later, what its help says)."""
    default, said = option["default"], said.strip("`")
    values = default if isinstance(default, list) else [default]
    every = values == option["choices"] or (not option["choices"] and len(values) > 1)  # "all" of a list default
    if said in (str(default), ",".join(str(value) for value in values)) or (said == "all" and every):
        return True
    try:
        if default is not None and not isinstance(default, (bool, list)) and float(said) == float(str(default)):
            return True
    except ValueError:
        pass
    return bool(re.search(rf"default:?\s*{re.escape(said)}\b", option["help"]))


def default_problems(blocks: list[Block], known: Facts) -> list[str]:
    """A default the docs give an option (:data:`DEFAULT_AFTER`) is its parser's."""
    problems = []
    for block in blocks:
        text = " ".join(block.text.split())
        for flag, span in prose_options(block):
            said = re.search(rf"`{re.escape(span)}{DEFAULT_AFTER}", text) if span == flag else None
            if not said:
                continue
            context, _ = context_clis(block, known)
            owners = [(cli, sub) for cli, sub in context if flag in cli.options(sub)]
            owners = owners or [(cli, sub) for cli in known.clis.values() for sub in cli.parsers if flag in cli.parsers[sub]]
            options = [cli.options(sub)[flag] for cli, sub in owners]
            if options and not any(same_value(said.group(1), option) for option in options):
                defaults = ", ".join(sorted({str(option["default"]) for option in options}))
                problems.append(f"{block.where}: {flag} said to default to {said.group(1)}; its parser's default: {defaults}")
    return problems


# --------------------------------------------------------------------------- names in code spans

SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")
UPPER = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*")
CAMEL = re.compile(r"[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+|[A-Z]{2,}[a-z][A-Za-z0-9]*")
KEBAB = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)+")
DOTTED = re.compile(r"(?:vision_serving|builders|devtools|benchmarks)(?:\.\w+)+")
ASSIGNMENT = re.compile(r"(\w+)\s*[:=]\s*\S.*")


def code_names(block: Block) -> list[str]:
    """The names a block's prose puts in code spans: a span that is one name, or a name followed by its shape or
    value (``BOXES [K, 4]``, ``max_instances 8``) or given one (``class_agnostic: true``, ``exclude = []``)."""
    if block.kind == "code":
        return []
    found = []
    for span in docs.inline_code(block.text):
        assigned = ASSIGNMENT.fullmatch(span)
        first, _, rest = span.partition(" ")
        name = assigned.group(1) if assigned else first if not rest or re.match(r"[\[\d]|true|false", rest) else span
        if SNAKE.fullmatch(name) or UPPER.fullmatch(name) or CAMEL.fullmatch(name) or KEBAB.fullmatch(name) or DOTTED.fullmatch(name):
            found.append(name)
    return found


def dotted_defined(name: str) -> bool:
    """``package.module.Name.attr``: the longest module prefix is a file here and the rest is named in it."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        source = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if source.is_file():
            text = source.read_text()
            return all(re.search(rf"\b{re.escape(part)}\b", text) for part in parts[cut:])
    return False


def name_problems(blocks: list[Block], known: Facts) -> list[str]:
    """Each name in a code span is defined by a config, a task's roles or the code (else listed above)."""
    problems = []
    for block in blocks:
        for name in code_names(block):
            if name in EXTERNAL_NAMES or name in HISTORICAL_NAMES or name in EXAMPLE_PIPELINES or name in known.alerts:
                continue
            if DOTTED.fullmatch(name):
                defined = dotted_defined(name)
            elif KEBAB.fullmatch(name):
                defined = name in known.text
            else:
                defined = name in known.config_values or name in known.tensors or name in known.words
            if not defined:
                problems.append(f"{block.where}: `{name}` is defined by no config or code here")
    return problems


def table_header(block: Block) -> list[str]:
    rows = [line for line in block.group.splitlines() if docs.ROW.match(line)]
    return cells(rows[0]) if rows else []


def cells(row: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def tensor_spans(block: Block) -> list[tuple[str, str]]:
    """(name, why it is a tensor) of the UPPER_CASE names a block gives as tensors: with a shape (``BOXES [K, 4]``),
    or in a table column about tensors (``tensor``, ``... outputs``, ``... inputs``)."""
    found = [(span.split(" ")[0], "with a shape") for span in docs.inline_code(block.text) if re.fullmatch(r"[A-Z_]+ \[.*\]", span)]
    header, row = table_header(block), cells(block.text)
    if block.kind == "row" and row != header:
        for title, cell in zip(header, row):
            if re.search(r"\btensor|\boutputs?\b|\binputs?\b", title):
                found += [(span.split(" ")[0], f"column {title}") for span in docs.inline_code(cell) if UPPER.fullmatch(span.split(" ")[0])]
    return found


def tensor_problems(blocks: list[Block], known: Facts) -> list[str]:
    """Each name given as a tensor (:func:`tensor_spans`) is an input or output of a config or a task's role."""
    return [
        f"{block.where}: `{name}` ({why}) is no tensor of a config or a task's roles"
        for block in blocks
        for name, why in tensor_spans(block)
        if name not in known.tensors
    ]


def shape(text: str) -> list[str]:
    return [part.strip() for part in text.strip("`[] ").split(",")]


def pipeline_table_problems(blocks: list[Block], known: Facts) -> list[str]:
    """A section named after a shipped pipeline lists its ensemble's tensors: the same names (with ``IMAGE``,
    which every pipeline's section shares), directions, datatypes and shapes (``[N, ...]``: N the batch)."""
    problems = []
    by_section: dict[tuple[str, str], list[Block]] = {}
    for block in blocks:
        pipeline = block.heading.strip("`")
        if block.kind == "row" and pipeline in known.ensembles and "tensor" in table_header(block):
            by_section.setdefault((block.doc, pipeline), []).append(block)
    for (_, pipeline), rows in by_section.items():
        ensemble = known.ensembles[pipeline]
        header, listed = table_header(rows[0]), set()
        for block in rows:
            row = dict(zip(header, cells(block.text)))
            name = row.get("tensor", "").strip("`")
            if not UPPER.fullmatch(name):
                continue
            listed.add(name)
            if name not in ensemble:
                problems.append(f"{block.where}: {pipeline} has no tensor {name}")
                continue
            kind, datatype, dims = ensemble[name]
            if kind not in row.get("direction", kind) or row.get("datatype", datatype) != datatype:
                problems.append(
                    f"{block.where}: {name} is a {datatype} {kind} of {pipeline}, not {row.get('direction')} {row.get('datatype')}"
                )
            said = shape(row.get("shape", ""))
            if said != [""] and (len(said) != len(dims) + 1 or any(s.isdigit() and int(s) != d for s, d in zip(said[1:], dims))):
                problems.append(f"{block.where}: {name} of {pipeline} has dims {dims} (after the batch), not {row.get('shape')}")
        missing = set(ensemble) - listed - {"IMAGE"}
        if missing:
            problems.append(f"{rows[0].where}: the {pipeline} table leaves out {', '.join(sorted(missing))}")
    return problems


# A config key said to have a value as shipped or by default: ``key (512 ...)``, ``key (default 2)``, ``key, shipped 2.0``.
CONFIG_VALUE = r"`{key}`\s*(?:\(\s*(?:default:?\s*)?|,\s*(?:default|shipped):?\s*)`?\"?(-?\d[\d.]*)(?![\d.])"


def config_value_problems(blocks: list[Block], known: Facts) -> list[str]:
    """A value a config key is said to have (:data:`CONFIG_VALUE`) is one a shipped config (or a template in the
    code) sets, or the code's default for it."""
    problems = []
    for block in blocks:
        text = " ".join(block.text.split())
        for name in set(code_names(block)):
            if name not in known.config_values:
                continue
            for said in re.finditer(CONFIG_VALUE.format(key=re.escape(name)), text):
                values = known.config_values[name] | known.code_defaults.get(name, set())
                if not any(equal(said.group(1), value) for value in values):
                    problems.append(f"{block.where}: `{name}` {said.group(1)}: no config sets it (they set {', '.join(sorted(values))})")
    return problems


def equal(said: str, value: str) -> bool:
    try:
        return float(said) == float(value)
    except ValueError:
        return said.lower() == value.lower()


# --------------------------------------------------------------------------- paths

TOP_LEVEL = re.compile(
    r"(?:\./)?((?:k8s|docker|tests|model_repository|benchmarks|scripts|requirements|builders|vision_serving|devtools)/\S*|versions\.env|pyproject\.toml)"
)


def path_problems(blocks: list[Block], known: Facts) -> list[str]:
    """Each repository path a command or code span names (from a top-level folder) exists."""
    problems = []
    for block in blocks:
        words = [word for command in docs.command_candidates(block) for word in command]
        for word in words:
            named = TOP_LEVEL.fullmatch(word.rstrip(":,;)"))
            if not named or re.search(r"[<>{}]|\.\.\.|…", word) or set(Path(named.group(1)).parts) & EXAMPLE_PIPELINES:
                continue
            path = named.group(1).rstrip("/")
            exists = any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()
            if not exists:
                problems.append(f"{block.where}: {path} does not exist")
    return sorted(set(problems))


# --------------------------------------------------------------------------- alerts


def humps(word: str) -> list[str]:
    return re.findall(r"[A-Z][a-z0-9]*", word)


def alert_prefix(known: Facts) -> str:
    """The CamelCase words every server alert's name starts with (``VisionServing``; the stream service's alerts are
    named in full)."""
    common = []
    for words in zip(*(humps(name) for name in known.alerts if not name.startswith("VisionStream"))):
        if len(set(words)) > 1:
            break
        common.append(words[0])
    return "".join(common)


def alert_like(word: str, known: Facts) -> bool:
    """A CamelCase word that reads like an alert: it starts as the alerts do, or ends as one does."""
    prefix = alert_prefix(known)
    endings = {humps(name)[-1] for name in known.alerts}
    return (word.startswith(prefix) and word != prefix) or (len(humps(word)) > 1 and humps(word)[-1] in endings)


def alert_problems(blocks: list[Block], known: Facts) -> list[str]:
    """Each alert-like name is an alert, or an alert without the alerts' common prefix (``VisionServing``)."""
    prefix, problems = alert_prefix(known), []
    for block in blocks:
        for word in set(re.findall(r"\b[A-Z][A-Za-z0-9]+\b", block.text)):
            if not alert_like(word, known) or word in HISTORICAL_NAMES:
                continue
            if word not in known.alerts and prefix + word not in known.alerts:
                problems.append(f"{block.where}: {word} is no alert of k8s/prometheusrule.yaml")
    return problems


def rule_numbers(rule: str) -> set[float]:
    """The numbers of a rule's expression and ``for``, durations in minutes."""
    numbers = {float(n) for n in re.findall(r"(?<![\w.\[])(\d+(?:\.\d+)?(?:e-?\d+)?)(?![\w.])", rule)}
    return numbers | {float(n) for n in re.findall(r"\b(\d+)m\b", rule)}


def said_numbers(text: str) -> list[tuple[str, set[float]]]:
    """What a sentence's thresholds mean in a rule's units: % a fraction, ms microseconds, min minutes."""
    found = []
    for number, unit in re.findall(r"(?<![\w.])(\d+(?:\.\d+)?)\s*(%|ms|min\b|minutes|times)?", docs.prose(text)):
        value = float(number)
        meant = {"%": {value / 100}, "ms": {value * 1000}, "min": {value}, "minutes": {value}}.get(unit, {value})
        found.append((f"{number} {unit}".strip(), meant))
    return found


def alert_statements(blocks: list[Block], known: Facts) -> list[tuple[Block, str, str]]:
    """(block, alert, what it says fires it): a table row that links an alert's runbook (its other cells), and the
    first paragraph of a section named after an alert (the runbooks' summary)."""
    found, previous = [], None
    for block in blocks:
        named = re.search(r"\[(\w+)\]\(runbooks\.md#", block.text) if block.kind == "row" else None
        if named and named.group(1) in known.alerts:
            found.append((block, named.group(1), " ".join(cells(block.text)[1:])))
        elif block.kind == "paragraph" and previous is not None and previous.kind == "heading" and block.heading in known.alerts:
            found.append((block, block.heading, block.text))
        previous = block
    return found


def alert_threshold_problems(blocks: list[Block], known: Facts) -> list[str]:
    """Each threshold, duration and count said of an alert (:func:`alert_statements`) is in its rule."""
    problems = []
    for block, alert, said_text in alert_statements(blocks, known):
        numbers = rule_numbers(known.alerts[alert])
        for said, meant in said_numbers(said_text):
            if not meant & numbers:
                problems.append(f"{block.where}: {alert}: {said} is not in its rule")
    return problems


# --------------------------------------------------------------------------- figures


# Where a setting (a threshold, a limit, a size) is set: a config, or the script or code that sets it.
SETTING_FILE = re.compile(
    r"[\w./<>*-]*(?:\.pbtxt|\.yaml|pipeline\.toml|versions\.env)\b|\b(?:scripts|docker)/[\w.-]+\.sh\b|\b(?:vision_serving|builders|devtools|benchmarks)/[\w/]+\.py\b"
)
# A figure the docs say plainly is not backed by a committed result (measured once by hand, or an example).
UNBACKED = re.compile(r"no\s+committed\s+result|not\s+measured\s+here|an\s+example\b|by\s+arithmetic")


def sources(text: str, doc: str, alerts: Iterable[str] = ()) -> list[str]:
    """The committed results and tests a text names (links resolved from the doc) that exist, the config files,
    scripts and code it names (a setting's source; an alert's name stands for its rule), and its plain word that a
    figure has no committed result."""
    found = SETTING_FILE.findall(text) + UNBACKED.findall(text) + [name for name in alerts if name in text]
    for name in docs.source_candidates(text) + [t for t in docs.LINK_TARGET.findall(text) if "benchmarks/results" in t]:
        path = (ROOT / doc).parent / name if name.startswith("..") else ROOT / name.lstrip("./")
        if any(ROOT.glob(str(path.resolve().relative_to(ROOT)))):
            found.append(name)
    return found


def figure_problems(blocks: list[Block], known: Facts) -> list[str]:
    """Each block with a measured figure names its source, or its table, list or section does."""
    problems = []
    for block in blocks:
        if block.kind in {"code", "heading"}:
            continue
        found = docs.figures(block.text)
        if found and not sources(f"{block.text}\n{block.group}\n{block.heading}", block.doc, known.alerts):
            problems.append(f"{block.where}: {', '.join(found[:4])}: names no committed result, test or config")
    return problems


# --------------------------------------------------------------------------- the tests

CHECKS: dict[str, Callable[[list[Block], Facts], list[str]]] = {
    "commands": command_problems,
    "options": option_problems,
    "defaults": default_problems,
    "names": name_problems,
    "tensors": tensor_problems,
    "pipeline tables": pipeline_table_problems,
    "config values": config_value_problems,
    "paths": path_problems,
    "alerts": alert_problems,
    "alert thresholds": alert_threshold_problems,
    "figures": figure_problems,
}


@pytest.mark.parametrize("check", CHECKS)
def test_the_docs_agree_with_the_code(check: str):
    problems = CHECKS[check](doc_blocks(), facts())
    assert not problems, f"{len(problems)} {check} of the docs the code does not back:\n" + "\n".join(problems)


def test_the_parsers_are_found_without_onnx():
    known = facts()
    assert not known.heavy, f"building the CLIs' parsers imported {known.heavy}: this test belongs in tests/onnx"
    missing = [name for name, cli in known.clis.items() if not cli.parsers]
    assert not missing, [(name, known.clis[name].error) for name in missing]
    assert {"builders", "benchmarks.systems", "devtools.canary", "scripts.serve"} <= set(known.clis)
    assert "check" in known.clis["builders"].subcommands()


def counts(blocks: list[Block], known: Facts) -> dict[str, int]:
    """How much of each kind the checks hold to the code."""
    found = commands(blocks, known)
    names = {name for block in blocks for name in code_names(block)}
    alerts = {word for block in blocks for word in re.findall(r"\b[A-Z][A-Za-z0-9]+\b", block.text) if alert_like(word, known)}
    return {
        "commands": sum(command.kind in {"cli", "script"} or command.target in {"kubectl", "docker"} for command in found),
        "options in commands": sum(len(docs.flags(command.arguments)) for command in found if command.kind in {"cli", "script"}),
        "options in prose": sum(len(prose_options(block)) for block in blocks),
        "names": len(names),
        "config keys": len(names & set(known.config_values)),
        "tensors": len({name for block in blocks for name, _ in tensor_spans(block)} | (names & known.tensors)),
        "alerts": len(alerts),
        "alert statements": len(alert_statements(blocks, known)),
        "figures": sum(len(docs.figures(block.text)) for block in blocks if block.kind not in {"code", "heading"}),
    }


def test_the_exceptions_are_still_needed():
    """Each entry of the lists above is named by the docs and defined by nothing here (else it is no exception)."""
    blocks, known = doc_blocks(), facts()
    text = "\n".join(block.text for block in blocks)
    names = {name for block in blocks for name in code_names(block)}
    defined = known.words | set(known.config_values)
    stale = [name for name in EXTERNAL_NAMES if name not in names or name in defined]
    stale += [name for name in HISTORICAL_NAMES if name not in text or name in known.text]
    options = {flag for block in blocks for flag, _ in prose_options(block)}
    options |= {flag for command in commands(blocks, known) for flag in docs.flags(command.arguments)}
    ours = {flag for cli in known.clis.values() for flag in cli.all_options()} | known.script_flags
    stale += [flag for flag in EXTERNAL_OPTIONS if flag not in options or flag in ours]
    stale += [program for program in EXTERNAL_PROGRAMS if not any(command.target == program for command in commands(blocks, known))]
    assert not stale, f"no longer needed as exceptions: {stale}"


def test_the_checks_find_what_the_docs_name():
    """A regular expression that stops matching would let every check pass on nothing."""
    found = counts(doc_blocks(), facts())
    least = {"commands": 150, "options in commands": 100, "options in prose": 100, "names": 150, "config keys": 20, "tensors": 12}
    least |= {"alerts": 12, "alert statements": 15, "figures": 50}  # most figures live in benchmarks/results/README.md
    assert all(found[kind] >= number for kind, number in least.items()), found


# --------------------------------------------------------------------------- the checks on planted docs


def planted(markdown: str) -> list[Block]:
    return docs.blocks(markdown, "planted.md")


def test_blocks_rows_items_and_code():
    found = planted(
        "# Title\n\nA caption naming `benchmarks/results/steps.md`:\n\n| a | b |\n|---|---|\n| 1 ms | 2 |\n\n"
        "- an item\n  continued\n\n      indented code --in-item\n\n- second\n\n```bash\n./scripts/serve --cpus 2  # comment\n```\n"
    )
    assert [block.kind for block in found] == ["heading", "paragraph", "row", "row", "row", "item", "code", "item", "code"]
    assert found[4].group.startswith("A caption naming") and "| 1 ms | 2 |" in found[4].group
    assert found[5].text == "an item\ncontinued" and found[6].text == "indented code --in-item"
    assert all(block.heading == "Title" for block in found[1:])
    assert docs.command_candidates(found[8]) == [["./scripts/serve", "--cpus", "2"]]


def test_shell_words_and_flags():
    line = "VISION_SERVING_MALLOC=glibc ./scripts/canary --pipeline x [--window 5m] [--json] --grpc-url/--http-url | grep y"
    assert docs.shell_words(line) == [
        ["./scripts/canary", "--pipeline", "x", "--window", "5m", "--json", "--grpc-url/--http-url"],
        ["grep", "y"],
    ]
    assert docs.flags(docs.shell_words(line)[0]) == ["--pipeline", "--window", "--json", "--grpc-url", "--http-url"]
    assert docs.flags(["--exit-timeout-secs=40", "-m", "gpu"]) == ["--exit-timeout-secs", "-m"]
    assert docs.inline_code("a `span\nacross` line and ``a `tick` inside``") == ["span across", "a `tick` inside"]


def test_figures():
    text = "served 3.77 photos/s, 1.81× faster, cosine 0.998 and IoU ≥ 0.95; 4.2 % CER; 59/60 lines; `--budget-ms 250`"
    assert docs.figures(text) == ["3.77 photos/s", "1.81×", "cosine 0.998", "IoU ≥ 0.95", "4.2 %", "59/60 lines"]
    assert docs.figures("a 64 × 64 thumbnail, 2 × the target, fp16, pip 23.2, batch 8, 2026-12-02") == []


PLANTED_PROBLEMS = [
    ("commands", "`python -m builders check --no-such-flag`", "builders takes no --no-such-flag"),
    ("commands", "```bash\n./scripts/no-such-script --help\n```", "scripts/no-such-script does not exist"),
    ("commands", "`python -m builders.no_such_module --x`", "no module builders.no_such_module"),
    ("commands", "`kubectl -n vision-serving rollout undo deployment/no-such-deployment`", "k8s/ names no no-such-deployment"),
    ("commands", "`kubectl -n vision-serving rollout undo deployment/vision-serving`", None),
    ("options", "`./scripts/serve` takes `--no-such-option`.", "--no-such-option is not an option of scripts.serve"),
    ("options", "`./scripts/segment` writes into `--out-dir`; `./scripts/serve` has no `--overlay`.", None),
    ("defaults", "`./scripts/classify` sends `--batch-size` (default 9) images.", "--batch-size said to default to 9"),
    ("defaults", "`./scripts/classify` sends `--batch-size` (default 8) images.", None),
    ("names", "Set `decode_undersampling` in the preprocess config.", "`decode_undersampling` is defined by no config"),
    ("names", "Set `decode_oversampling` for `IMAGE`, `vision_serving.served.ServedPipeline`.", None),
    ("names", "Call `vision_serving.served.NoSuchPipeline`.", "`vision_serving.served.NoSuchPipeline` is defined by no config"),
    ("config values", "`drift_window` (1024 images as shipped)", "`drift_window` 1024: no config sets it"),
    ("config values", "`drift_window` (512 images as shipped)", None),
    ("tensors", "| tensor | meaning |\n|---|---|\n| `MASK_BOXES` | boxes |\n", "`MASK_BOXES` (column tensor) is no tensor"),
    ("tensors", "It answers `MASK_BOXES [K, 4]`.", "`MASK_BOXES` (with a shape) is no tensor"),
    ("tensors", "It answers `BOXES [K, 4]` and, per the table, `TEXTS`.\n\n| tensor |\n|---|\n| `TEXTS` |\n", None),
    (
        "pipeline tables",
        "## `face_detector`\n\n| tensor | direction | datatype | shape |\n|---|---|---|---|\n| `BOXES` | output | FP32 | `[N, K, 4]` |\n"
        "| `SCORES` | output | INT32 | `[N, K]` |\n| `COUNT` | output | INT32 | `[N, 1, 1]` |\n",
        "SCORES is a FP32 output of face_detector, not output INT32",
    ),
    ("paths", "See `k8s/no-such-file.yaml`.", "k8s/no-such-file.yaml does not exist"),
    ("alerts", "VisionServingQueueP99High fires.", "VisionServingQueueP99High is no alert"),
    ("alerts", "GpuSaturated and VisionServingDown fire.", None),
    (
        "alert thresholds",
        "| alert | fires when |\n|---|---|\n| [VisionServingGpuSaturated](runbooks.md#x) | a GPU is over 80 % busy for 15 min |\n",
        "VisionServingGpuSaturated: 80 % is not in its rule",
    ),
    ("figures", "It serves 123 req/s.", "123 req/s: names no committed result"),
    ("figures", "It serves 123 req/s (`benchmarks/results/no_such.md`).", "123 req/s: names no committed result"),
    ("figures", "It serves 123 req/s ([systems.md](benchmarks/results/systems.md)).", None),
    ("figures", "It serves 123 req/s (measured once, no committed result).", None),
    ("figures", "## Served 123 req/s\n\nA table:\n\n| x |\n|---|\n| 4 ms |\n", "4 ms: names no committed result"),
    ("figures", "A table (`tests/integration/test_overload.py`):\n\n| x |\n|---|\n| 4 ms |\n", None),
]


@pytest.mark.parametrize(("check", "markdown", "expected"), PLANTED_PROBLEMS)
def test_a_planted_doc_is_held_to_the_code(check: str, markdown: str, expected: str | None):
    problems = CHECKS[check](planted(markdown), facts())
    if expected is None:
        assert not problems
    else:
        assert any(expected in problem for problem in problems), problems


# --------------------------------------------------------------------------- behaviour: what the docs show, the code does

README = ROOT / "README.md"
MAX_README_LINES = 200
MAX_WORDS = 25_000  # README.md and every page under docs/ together, as `wc -w` counts them


def test_the_docs_fit_their_budget():
    """The front door stays short, and the docs stay readable: evidence and history go to benchmarks/results/."""
    lines = len(README.read_text().splitlines())
    words = {path.relative_to(ROOT).as_posix(): len(path.read_text().split()) for path in DOCUMENTS}
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (at most {MAX_README_LINES})"
    assert sum(words.values()) <= MAX_WORDS, f"{sum(words.values())} words (at most {MAX_WORDS}): {words}"


def named_files(text: str, doc: str) -> list[Path]:
    """The files a text names as a figure's source (committed results, tests, configs, scripts, code): a results
    folder stands for every result in it, a report for its record too (``steps.md`` and ``steps.json``), a bare
    spec or config name for every pipeline's."""
    names = docs.source_candidates(text) + SETTING_FILE.findall(text)
    names += [target for target in docs.LINK_TARGET.findall(text) if "benchmarks/results" in target]
    found: list[Path] = []
    for name in names:
        name = name.split("#")[0].rstrip(".,;:)")
        relative = ((ROOT / doc).parent / name).resolve().relative_to(ROOT) if name.startswith("..") else Path(name.lstrip("./"))
        pattern = re.sub(r"<[^>]+>", "*", relative.as_posix())
        top = pattern.split("/")[0]
        matches = sorted(ROOT.glob(pattern)) if (ROOT / top).exists() else sorted(ROOT.glob(f"model_repository/**/{pattern}"))
        for path in matches:
            if path.is_dir():
                found += sorted(p for p in path.rglob("*") if p.suffix in {".md", ".json"})
            else:
                found += [path, *(p for p in (path.with_suffix(".json"), path.with_suffix(".md")) if p != path and p.is_file())]
    return found


@cache
def file_numbers(path: Path) -> tuple[float, ...]:
    return tuple(docs.numbers_in(path.read_text(errors="replace")))


# Tables whose rows the tests below compute from the code (doc, the header's first cells): their figures are the
# code's output, not a result file's text.
COMPUTED_TABLES = {("docs/sizing.md", ("pipeline", "uploads")), ("docs/sizing.md", ("model", "precision"))}


def figure_value_problems(blocks: list[Block], known: Facts) -> list[str]:
    """Each figure's number is in the file its block (else its table or list, else its section) names as its source,
    as the doc rounds it; a block that says its figure has no committed result is not looked up."""
    problems = []
    for block in blocks:
        if block.kind in {"code", "heading"} or UNBACKED.search(block.text):
            continue
        if block.kind == "row" and any(
            block.doc == doc and tuple(table_header(block)[: len(head)]) == head for doc, head in COMPUTED_TABLES
        ):
            continue
        found = docs.figure_numbers(block.text)
        if not found:
            continue
        files: list[Path] = []
        for layer in (block.text, block.group, block.heading):
            files = named_files(layer, block.doc)
            if files or UNBACKED.search(layer):
                break
        if not files:
            continue  # figure_problems says so, or the layer says it has no committed result
        values = [value for path in files for value in file_numbers(path)]
        for figure, number in found:
            if not docs.states(number, values, percent="%" in figure):
                named = ", ".join(sorted({path.relative_to(ROOT).as_posix() for path in files}))
                problems.append(f"{block.where}: {figure}: {number} is not in {named}")
    return problems


def test_each_figure_is_in_the_result_it_names():
    problems = figure_value_problems(doc_blocks(), facts())
    assert not problems, f"{len(problems)} figures not found in the results they name:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("The classifier serves INT8: top-1 agreement 0.967 (`benchmarks/results/served_precision.json`).", None),
        ("The classifier serves INT8: top-1 agreement 0.971 (`benchmarks/results/served_precision.json`).", "0.971 is not in"),
        ("Served 3.77 photos/s ([systems.md](benchmarks/results/text_reader/systems.md)).", None),
        ("Served 3.79 photos/s ([systems.md](benchmarks/results/text_reader/systems.md)).", "3.79 is not in"),
        ("Served 9.99 photos/s (measured once, no committed result).", None),
    ],
)
def test_a_planted_figure_is_looked_up_in_its_result(markdown: str, expected: str | None):
    problems = figure_value_problems(planted(markdown), facts())
    assert (not problems) if expected is None else any(expected in problem for problem in problems), problems


# --------------------------------------------------------------------------- documented outputs


def shown_outputs(blocks: list[Block]) -> list[docs.Shown]:
    """Every documented command that shows what it prints."""
    return [shown for block in blocks for shown in docs.shown_commands(block) if shown.output.strip()]


def test_every_shown_output_is_produced_by_a_test():
    """A console example's output is the program's: each is run by the tier its program needs (docs.example_tier),
    and each Python example that says what it prints is run against the shared server."""
    unclaimed = [f"{shown.block.where}: $ {shown.command}" for shown in shown_outputs(doc_blocks()) if not docs.example_tier(shown.command)]
    assert not unclaimed, "documented outputs no test produces:\n" + "\n".join(unclaimed)
    assert docs.printed_blocks(doc_blocks()), "no Python example says what it prints"


UNIT_EXAMPLES = [shown for shown in shown_outputs(doc_blocks()) if docs.example_tier(shown.command) == "unit"]


@pytest.mark.parametrize("shown", UNIT_EXAMPLES, ids=[shown.block.where for shown in UNIT_EXAMPLES])
def test_a_shown_command_prints_what_the_doc_shows(shown: docs.Shown):
    words = docs.shell_words(shown.command)[0]
    assert is_python(words[0]), shown.command
    run = subprocess.run([sys.executable, *words[1:]], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert docs.same_output(shown.output, run.stdout + run.stderr), (
        f"{shown.block.where}: the doc shows\n{shown.output}\nit prints\n{run.stdout}"
    )


@cache
def capacity_tables() -> list[str]:
    """The lines ``python -m benchmarks.capacity --all`` prints from the committed measurements."""
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.capacity", "--all"], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return [line.strip() for line in run.stdout.splitlines()]


def table_rows(doc: str, header_start: str) -> list[list[str]]:
    """The body rows' cells of the tables of a doc whose header row starts as given."""
    found = []
    for block in doc_blocks([ROOT / doc]):
        header = table_header(block) if block.kind == "row" else []
        if header[: len(header_start)] == header_start and cells(block.text) != header and not set(block.text) <= set("|-: "):
            found.append(cells(block.text))
    return found


def test_the_planners_tables_are_what_it_computes():
    """docs/sizing.md's capacity and GPU memory rows are rows `python -m benchmarks.capacity --all` prints."""
    printed = set(capacity_tables())
    pod = next(line.strip() for line in (ROOT / "docs/sizing.md").read_text().splitlines() if line.strip().startswith("Pod: "))
    assert pod in printed, pod
    rows = table_rows("docs/sizing.md", ["pipeline", "uploads"]) + table_rows("docs/sizing.md", ["model", "precision"])
    assert len(rows) >= 5
    missing = ["| " + " | ".join(row) + " |" for row in rows if "| " + " | ".join(row) + " |" not in printed]
    assert not missing, "rows of docs/sizing.md the planner does not print:\n" + "\n".join(missing)


def test_the_sizing_table_is_what_the_sizing_computes():
    from vision_serving import cpu_sizing

    (preprocess, postprocess) = table_rows("docs/sizing.md", ["container CPUs"])
    header = next(
        table_header(b) for b in doc_blocks([ROOT / "docs/sizing.md"]) if b.kind == "row" and table_header(b)[0] == "container CPUs"
    )
    for cpus, pre, post in zip(header[1:], preprocess[1:], postprocess[1:]):
        step = cpu_sizing.step_layout(float(cpus), 1.0, cpu_sizing.DEFAULT_MAX_INSTANCES)
        assert pre == f"{step.instances} x {step.threads}", (cpus, pre)
        assert post == str(cpu_sizing.step_layout(float(cpus), 0.5, cpu_sizing.DEFAULT_MAX_INSTANCES, threaded=False).instances), cpus
    shown = next(
        line.strip() for line in (ROOT / "docs/sizing.md").read_text().splitlines() if line.strip().startswith("serve: image_classifier")
    )
    step = cpu_sizing.step_layout(2.0, 1.0, cpu_sizing.DEFAULT_MAX_INSTANCES)
    assert shown == f"serve: image_classifier_preprocess: {step} for {cpu_sizing.CpuLimit(2.0, 'CPU affinity')}"


def test_the_start_estimate_table_is_what_the_estimate_computes():
    from builders.tensorrt import startup

    estimate = startup.estimate(json.loads((ROOT / "benchmarks/results/gpu_memory.json").read_text())["models"])
    expected = {
        "every plan built on one GPU": (estimate.build_seconds, f"timeout {estimate.build_timeout_seconds}"),
        "a pod on a node with no plan": (estimate.cold_seconds(), f"progressDeadlineSeconds: {estimate.progress_deadline_seconds}"),
        "Triton's start and warm-up": (estimate.startup_seconds, f"failureThreshold: {estimate.startup_failure_threshold}"),
        "a pod whose plans are in the shared cache": (estimate.cached_seconds(), ""),
    }
    rows = table_rows("docs/kubernetes.md", ["", "estimate"])
    assert len(rows) == len(expected)
    for row in rows:
        (seconds, told) = next(value for label, value in expected.items() if row[0].startswith(label))
        assert row[1] == f"{seconds:.1f} s" and told in row[2], row


def test_the_served_precision_table_is_the_record():
    record = json.loads((ROOT / "benchmarks/results/served_precision.json").read_text())
    serves: dict[str, set[str]] = {}
    for model in record["models"]:
        serves.setdefault(model["pipeline"], set()).add(model["precision"].upper())
    rows = table_rows("docs/building.md", ["pipeline", "INT8", "FP16", "serves"])
    assert {row[0] for row in rows} == set(serves)
    for row in rows:
        assert {row[3]} == serves[row[0]], row


def test_the_text_readers_longest_strip_is_what_its_preprocess_sends():
    """docs/text-reader.md: a 1:6 strip becomes 736 x 4416, over max_detector_side; a strip wider than 1:8 is padded."""
    import numpy as np

    from vision_serving.tasks.text_reading import detection, steps
    from vision_serving.tasks.text_reading.preprocessor import TEXT_DEFAULTS

    text = " ".join((ROOT / "docs/text-reader.md").read_text().split())
    assert "a 1:6 strip becomes 736 x 4416" in text and f"`max_detector_side` ({steps.MAX_DETECTOR_SIDE}" in text
    sizes = {
        ratio: detection.prepare(np.zeros((100, 100 * ratio, 3), np.uint8), TEXT_DEFAULTS.detection).tensor.shape[1:] for ratio in (6, 9)
    }
    assert sizes[6] == (736, 4416) and max(sizes[9]) <= steps.MAX_DETECTOR_SIDE, sizes


def test_only_the_documented_modules_name_a_task_or_a_head():
    """docs/design.md: outside their own modules, only the YOLO family and the benchmarks that measure one name a
    task or a head."""
    from vision_serving.tasks import registry
    from vision_serving.tasks.detection_heads import registry as heads

    said = " ".join((ROOT / "docs/design.md").read_text().split())
    allowed = {
        f"builders/families/{name}.py" for name in ("yolo", "yolo_classify", "yolo_dense", "yolo_depth", "yolo_exports", "yolo_semantic")
    }
    allowed |= {"benchmarks/detection.py", "benchmarks/steps.py"}
    assert all(name.rpartition("/")[0] in said or name in said for name in allowed)
    allowed.add("builders/scaffold.py")  # its family `yolo`, the word of a head
    allowed |= {path.relative_to(ROOT).as_posix() for path in (ROOT / "scripts").glob("*.py")}  # a task's own script
    assert "scripts/<name>.py" in " ".join((ROOT / "docs/models.md").read_text().split())
    names = {*registry.TASKS, *heads.HEADS}
    # A task's own answer and client (gateway/answers/<task>.py, devtools/clients/<task>.py: found by the task's name).
    assert "gateway/answers/" in said and "devtools/clients/" in said
    allowed |= {f"{folder}/{name}.py" for folder in ("gateway/answers", "devtools/clients") for name in registry.TASKS}
    allowed.add("builders/tensorrt_onnx_ops.py")  # OneHot's input is named "depth" in the ONNX operator set, not the task
    naming = set()
    for path in tracked_files():
        relative = path.relative_to(ROOT).as_posix()
        if path.suffix != ".py" or relative.startswith(("tests/", "vision_serving/tasks/")):
            continue
        if any(re.search(rf"[\"']{name}[\"']", path.read_text()) for name in names):
            naming.add(relative)
    assert naming <= allowed, sorted(naming - allowed)


# --------------------------------------------------------------------------- documented messages


def upload_limits(pipeline: str = "image_classifier"):
    from vision_serving import layout, preprocessing

    return preprocessing.limits_from_config(model_config.load_config(layout.pipeline(pipeline).model_dir("preprocess")))


def refusal(data: bytes, limits=None) -> str:
    """What a preprocess says of an upload before decoding it (its ImageError), with the served limits."""
    from vision_serving import image_codec

    with pytest.raises(image_codec.ImageError) as raised:
        image_codec.check(data, limits or upload_limits())
    return str(raised.value)


def photo(name: str) -> bytes:
    from builders import photos

    return photos.photo_bytes(name)


def patched(data: bytes, position: int, value: bytes) -> bytes:
    return data[:position] + value + data[position + len(value) :]


def png_chunk(kind: bytes, data: bytes) -> bytes:
    import struct
    import zlib

    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encoded(name: str, form: str, **options) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.open(io.BytesIO(photo(name))).convert("RGB" if form != "GIF" else "P").save(buffer, form, **options)
    return buffer.getvalue()


def jpeg_segment(data: bytes, marker: int) -> int:
    """The byte where a JPEG's first segment of ``marker`` starts."""
    import struct

    position = 2
    while data[position + 1] != marker:
        position += 2 + struct.unpack(">H", data[position + 2 : position + 4])[0]
    return position


def uint32(value: int) -> bytes:
    return value.to_bytes(4, "big")


def dims(width: int, height: int) -> bytes:
    return uint32(width) + uint32(height)


def second_frame_header(data: bytes) -> bytes:
    sof, sos = jpeg_segment(data, 0xC0), jpeg_segment(data, 0xDA)
    return data[:sos] + data[sof : sof + 2 + int.from_bytes(data[sof + 2 : sof + 4], "big")] + data[sos:]


def vp8_size_lie(data: bytes) -> bytes:
    return patched(data, 16, (len(data)).to_bytes(4, "little"))


# What the preprocess says of the uploads the docs name (each built from a package photo), by the doc's message.
UPLOAD_MESSAGES: dict[str, Callable[[], str]] = {
    "truncated PNG: chunk iCCP at byte 33 declares 3168 bytes, the payload has 1959 left": lambda: refusal(photo("astronaut")[:2000]),
    "PNG declares 60000x60000 = 3600000000 pixels, over the limit of 50000000 pixels": lambda: refusal(
        patched(photo("brick"), 16, dims(60000, 60000))
    ),
    "unrecognized image format: looks like GIF, which is not accepted (first bytes 4749463837615802); accepted formats: JPEG, PNG, WEBP, HEIC, AVIF": (
        lambda: refusal(encoded("coffee", "GIF"), upload_limits("person_segmenter"))
    ),
    "corrupt PNG: chunk IDAT at byte 33 declares 2147483647 bytes, the payload has 217852 left": lambda: refusal(
        patched(photo("grass"), 33, uint32(0x7FFFFFFF))
    ),
    "corrupt PNG: chunk IHDR at byte 8 declares 2436008941 bytes (IHDR has 13)": lambda: refusal(
        patched(photo("brick"), 8, uint32(2436008941))
    ),
    "truncated PNG: 42647 bytes in its IDAT chunks, too few to code the declared 8000x5600 image (at least 43352)": lambda: refusal(
        patched(photo("text"), 16, dims(8000, 5600))
    ),
    "corrupt PNG: more than 8192 chunks": lambda: refusal(
        photo("microaneurysms")[:33] + png_chunk(b"tEXt", b"a\0b") * 8193 + photo("microaneurysms")[33:]
    ),
    "truncated JPEG: segment COM at byte 20 declares 65520 bytes, the payload has 61284 left": lambda: refusal(
        patched(photo("grace_hopper"), 22, (65520).to_bytes(2, "big"))
    ),
    "corrupt JPEG: a second frame header (SOF0) at byte 437": lambda: refusal(second_frame_header(photo("grace_hopper"))),
    "truncated JPEG: 60853 bytes in its scan 1 at byte 437, too few to code the declared 8000x5600 image (at least 262500)": lambda: (
        refusal(
            patched(
                photo("grace_hopper"), jpeg_segment(photo("grace_hopper"), 0xC0) + 5, (5600).to_bytes(2, "big") + (8000).to_bytes(2, "big")
            )
        )
    ),
    "corrupt WebP: chunk b'VP8 ' at byte 12 declares 37994 bytes, the RIFF container has 37974 left": lambda: refusal(
        vp8_size_lie(encoded("coffee", "WEBP", quality=80))
    ),
    "unrecognized image format: looks like ISO media (MP4, MOV, or HEIF of another coding), ...": lambda: refusal(
        b"\0\0\0\x18ftypisom\0\0\0\0isomiso2" + bytes(64)
    ),
    "HEIC is not accepted ...": lambda: refusal(
        b"\0\0\0\x18ftypheic\0\0\0\0mif1heic" + bytes(64), dataclasses_replace(upload_limits(), accepted_formats=("jpeg", "png"))
    ),
}


def dataclasses_replace(value, **changes):
    import dataclasses

    return dataclasses.replace(value, **changes)


def run_text(command: list[str], **options) -> str:
    """A command's stderr and stdout (one ends where the other starts: the messages are one line)."""
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, **options)
    return (run.stderr + run.stdout).strip()


def setup_error(tmp_path: Path) -> str:
    """scripts/bootstrap.sh in a checkout without .venv, given a Python that is not 3.11 with a shared libpython."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "bootstrap.sh").write_text((ROOT / "scripts" / "bootstrap.sh").read_text())
    return run_text(["bash", "-c", f"source {tmp_path}/scripts/bootstrap.sh"], env={"PATH": "/usr/bin:/bin", "PYTHON": "/bin/false"})


def port_in_use(tmp_path: Path) -> str:
    import socket

    from devtools.loadgen import free_port
    from devtools.triton_server import LauncherError, LocalTritonServer

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = LocalTritonServer(http_port=port, grpc_port=free_port(), metrics_port=free_port())
        with pytest.raises(LauncherError) as raised:
            server.check_ports()
    return f"serve: error: {raised.value}".replace(str(port), "8000")


def missing_onnx(tmp_path: Path) -> str:
    from vision_serving import core_model, layout

    config = model_config.load_config(layout.pipeline("image_classifier").model_dir("core"), "cpu")
    with pytest.raises(FileNotFoundError) as raised:
        core_model.onnx_path(config, tmp_path)
    return str(raised.value)


def choose_a_pipeline(tmp_path: Path) -> str:
    import argparse

    from builders import BuildError, arguments
    from tests.support import shipped

    with pytest.raises(BuildError) as raised:  # the shipped pipelines alone: a user's own may sit beside them
        arguments.load_one(argparse.Namespace(pipeline=None, model_repository=shipped.repository(tmp_path)))
    return f"error: {raised.value}"


def plan_mismatches(tmp_path: Path) -> list[str]:
    from builders.tensorrt import verify
    from builders.tensorrt.discovery import GpuFacts

    record = {"tensorrt": {"version": "10.13.3.9"}, "gpu": {"name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"}}
    return verify.compare_provenance(record, "10.14.1.48", [GpuFacts(name="NVIDIA H100 80GB HBM3", compute_capability="9.0")])


def pipelines_failing(tmp_path: Path) -> str:
    import argparse

    from builders import BuildError
    from builders.tensorrt import cli
    from vision_serving import layout

    def step(pipeline: layout.Pipeline) -> None:
        if pipeline.name == "text_reader":
            raise BuildError("the TensorRT ONNX parser failed")

    args = argparse.Namespace(pipeline=None, repository=None, model_repository=layout.MODEL_REPOSITORY)
    with pytest.raises(BuildError) as raised:
        cli.each_pipeline(args, step, log=lambda _: None)
    return f"error: {raised.value}"


def sizing_error(tmp_path: Path) -> str:
    import shutil

    from vision_serving import layout

    source = layout.pipeline("image_classifier")
    shutil.copytree(source.repository, tmp_path / "models" / "image_classifier", ignore=shutil.ignore_patterns("*.onnx", "__pycache__"))
    config = tmp_path / "models" / "image_classifier" / "image_classifier_preprocess" / "config.pbtxt"
    config.write_text(
        config.read_text().replace('key: "cpu_share" value { string_value: "1.0" }', 'key: "cpu_share" value { string_value: "2" }')
    )
    command = [
        sys.executable,
        "-m",
        "vision_serving.cpu_sizing",
        "--pipelines-root",
        str(tmp_path / "models"),
        "--out",
        str(tmp_path / "out"),
    ]
    return run_text(command, cwd=ROOT)


def no_pipeline(tmp_path: Path) -> str:
    (tmp_path / "models").mkdir()
    line = run_text(["bash", str(ROOT / "docker" / "tritonserver-pipelines.sh"), f"--pipelines-root={tmp_path / 'models'}"])
    return line.replace(str(tmp_path / "models"), "/models")


def other_tensorrt(tmp_path: Path) -> str:
    return run_text(
        [sys.executable, "-m", "builders", "same-tensorrt", "--builder-version", "10.13.3", "--server-version", "10.14.1"], cwd=ROOT
    )


def unreachable(tmp_path: Path) -> str:
    from devtools.loadgen import free_port

    port = free_port()
    (tmp_path / "photo.png").write_bytes(photo("coffee"))
    command = [sys.executable, "-m", "scripts.classify", "--url", f"localhost:{port}", "--deadline", "0", str(tmp_path / "photo.png")]
    return run_text(command, cwd=ROOT).replace(str(port), "8001")


def fake_programs(tmp_path: Path, programs: dict[str, str]) -> str:
    """A PATH whose first folder holds these shell programs (name -> script body), then the system's."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, body in programs.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return f"{folder}:/usr/bin:/bin"


def disk_short(tmp_path: Path) -> str:
    """scripts/disk-check.sh on a disk with 1 GB free (df and du answering as such a disk would)."""
    path = fake_programs(
        tmp_path, {"df": "echo 'Filesystem 1K-blocks Used Available Use% Mounted'; echo '/dev/x 100 0 1048576 1% /'", "du": "true"}
    )
    return run_text(["bash", str(ROOT / "scripts" / "disk-check.sh"), str(tmp_path)], env={"PATH": path})


def packages_missing(tmp_path: Path) -> str:
    """scripts/system-packages.sh as another user than root on a machine without the tools."""
    path = fake_programs(tmp_path, {"id": "echo 1000"})
    environment = {
        "PATH": f"{tmp_path / 'bin'}",
        "BROWSER_DIR": str(tmp_path),
        "JEMALLOC_GLOB": str(tmp_path / "none"),
        "SYSTEM_ROOT": str(tmp_path),
    }
    return run_text(["/bin/bash", str(ROOT / "scripts" / "system-packages.sh")], env=environment) if path else ""


def non_finite(tmp_path: Path) -> str:
    import numpy as np

    from vision_serving import drift

    with pytest.raises(drift.NonFiniteOutput) as raised:
        drift.check_finite(np.array([[np.nan], [1.0]], np.float32), "logits")
    return str(raised.value)


# The project's own messages of docs/troubleshooting.md, each as the code prints it for the input described.
MESSAGES: dict[str, Callable[[Path], str | list[str]]] = {
    (
        "setup: error: need Python 3.11 (requirements/dev.txt is locked for it) built with a shared libpython"
        " (the Triton Python backend stub embeds it); set PYTHON=/path/to/python3.11"
    ): setup_error,
    "serve: error: port 8000 is in use (another server?); pass --http-port/--grpc-port/--metrics-port": port_in_use,
    ".../model.onnx does not exist; build it with `python -m builders all`": missing_onnx,
    "error: choose a pipeline with --pipeline NAME (pipelines: face_detector, image_classifier, person_segmenter, text_reader)": choose_a_pipeline,
    "plan built with TensorRT 10.13.3, this machine has 10.14.1 (major.minor.patch must match; the build number may differ)": plan_mismatches,
    "plan built for compute capability 8.0 (NVIDIA A100-SXM4-80GB), GPU 0 is 9.0 (NVIDIA H100 80GB HBM3)": plan_mismatches,
    "error: N of M pipelines cannot be served (NAME), so this pod serves none: NAME: ...": pipelines_failing,
    "cpu_sizing: error: <model>: parameter cpu_share must be in (0, 1] (a share of the pod's CPUs), found 2": sizing_error,
    "tritonserver-pipelines: error: no pipeline in /models (no /models/<pipeline>/pipeline.toml): copy the built model repository there first": no_pipeline,
    "error: the builder image has TensorRT X, the server image Y: ...": other_tensorrt,
    "classify: error: cannot reach Triton at localhost:8001 (grpc): ...": unreachable,
    "non-finite model output (NaN or Inf) in <tensor> for N of M image(s)": non_finite,
    "test: warning: about N GB more disk is needed here ...": disk_short,
    "system-packages: warning: missing ...": packages_missing,
}
# Code spans of the symptom column that are no message of this project: other programs' messages (each row says whose),
# statuses, and commands or names the other checks hold to the code.
NOT_OURS = {
    "No matching distribution found for torch==2.13.0+cpu": "pip's",
    "THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE": "pip's",
    "ModuleNotFoundError": "Python's",
    "Failed to initialize NVML": "Triton's",
    "CUDA driver version is insufficient for CUDA runtime version": "Triton's",
    "libpng warning: iCCP: known incorrect sRGB profile": "libpng's",
    "No space left on device": "the kernel's",
    "inference request batch-size must be <= 16 for 'face_detector'": "Triton's (tests/integration/test_docs_examples.py)",
    "Exceeds maximum queue size": "Triton's",
    "Stub process ... is not healthy": "Triton's",
    "Tensor is stored in GPU and cannot be converted to NumPy": "Triton's Python backend's",
    "Failed to increase the shared memory pool size to N bytes": "Triton's Python backend's",
}


def symptom_spans() -> list[tuple[Block, str]]:
    """The code spans of the first column of docs/troubleshooting.md's tables (a table of messages: every column)."""
    found = []
    for block in doc_blocks([ROOT / "docs/troubleshooting.md"]):
        if block.kind != "row" or cells(block.text) == table_header(block) or set(block.text) <= set("|-: "):
            continue
        found += [(block, span) for span in docs.inline_code(cells(block.text)[0])]
    return found


def is_message(span: str) -> bool:
    """A span that reads as a line a program prints (not a status, a command, a file or a name)."""
    return bool(
        re.search(r"\b(error|warning|declares|not accepted|looks like|more than|second|does not exist|built (with|for))\b|:\s", span)
    )


def test_every_message_of_the_troubleshooting_page_is_the_codes():
    messages = {**MESSAGES, **dict.fromkeys(UPLOAD_MESSAGES)}
    unknown = [
        f"{block.where}: `{span}`"
        for block, span in symptom_spans()
        if is_message(span) and span not in messages and span not in NOT_OURS and not span.startswith("error: <file>.onnx")
    ]
    assert not unknown, "messages no test produces (add each to MESSAGES or UPLOAD_MESSAGES):\n" + "\n".join(unknown)
    text = (ROOT / "docs/troubleshooting.md").read_text()
    assert all(f"`{message}`" in text or f"`` {message} ``" in text for message in MESSAGES), "a message left the page"


@pytest.mark.parametrize("message", MESSAGES)
def test_a_documented_message_is_what_the_code_prints(message: str, tmp_path: Path):
    printed = MESSAGES[message](tmp_path)
    lines = printed if isinstance(printed, list) else printed.splitlines()
    assert any(docs.message_pattern(message).fullmatch(line.strip()) for line in lines), (
        f"the doc says\n{message}\nthe code prints\n{printed}"
    )


@pytest.mark.parametrize("message", UPLOAD_MESSAGES)
def test_a_documented_refusal_is_what_the_preprocess_says(message: str):
    said = UPLOAD_MESSAGES[message]()
    assert docs.message_pattern(message).fullmatch(said), f"the doc says\n{message}\nthe preprocess says\n{said}"


def test_the_errors_tables_upload_messages_are_the_preprocess_s():
    """docs/pipelines.md's upload examples are the served message (`in ensemble 'P', ` + the preprocess's, whose served
    form tests/integration/test_docs_examples.py checks): each is one of UPLOAD_MESSAGES."""
    shown = [span for block in doc_blocks([ROOT / "docs/pipelines.md"]) if block.kind == "row" for span in docs.inline_code(block.text)]
    uploads = [
        re.sub(r"^in ensemble '\w+', ", "", span) for span in shown if span.startswith("in ensemble") and ("PNG" in span or "GIF" in span)
    ]
    assert uploads and all(message in UPLOAD_MESSAGES for message in uploads), uploads


def stream_refusal(values: dict) -> str:
    from vision_streams.config import ConfigError, StreamConfig

    with pytest.raises(ConfigError) as raised:
        StreamConfig.from_mapping(values)
    return str(raised.value)


def url_refusal() -> str:
    """The gateway's fetch of a URL whose host resolves to a loopback address."""
    import asyncio

    from gateway import fetch
    from gateway.errors import ApiError

    class Localhost:
        async def addresses(self, host: str, port: int) -> list[str]:
            return ["127.0.0.1"]

    resolver = fetch.CheckedResolver(fetch.FetchPolicy(enabled=True, resolver=Localhost()))
    with pytest.raises(ApiError) as raised:
        asyncio.run(resolver.resolve("localhost", 80))
    return raised.value.message


CAMERA = {"name": "gate", "url": "rtsp://camera.local:8554/gate"}
# The other pages' documented messages (page, message as the page shows it), each as the code says it.
PAGE_MESSAGES: dict[tuple[str, str], Callable[[], str]] = {
    ("docs/streams.md", "stream 'gate': fps must be in (0, 120], got 500"): lambda: stream_refusal({**CAMERA, "fps": 500}),
    ("docs/streams.md", "stream 'gate': unknown key(s) colour; known: ..."): lambda: stream_refusal({**CAMERA, "colour": "red"}),
    ("docs/gateway.md", "URL refused: localhost resolves to 127.0.0.1, a loopback address"): url_refusal,
}


@pytest.mark.parametrize(("page", "message"), PAGE_MESSAGES)
def test_a_pages_message_is_what_the_code_says(page: str, message: str):
    shown = " ".join(" ".join(docs.inline_code(block.text)) for block in doc_blocks([ROOT / page]))
    assert message in shown, f"{page} no longer shows {message!r}"
    said = PAGE_MESSAGES[page, message]()
    assert docs.message_pattern(message).fullmatch(said), f"{page} says\n{message}\nthe code says\n{said}"
