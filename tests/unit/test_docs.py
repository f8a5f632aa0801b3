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
  ``k8s/prometheusrule.yaml``; the alerts table's thresholds and durations are its rules'.
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
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
HEAVY = ("onnx", "onnxruntime", "openvino", "onnx_graphsurgeon", "tensorrt")

# --------------------------------------------------------------------------- what is not ours to check

# Programs of other projects: their commands' words are theirs (paths given to them are still checked).
EXTERNAL_PROGRAMS = {
    "kubectl": "Kubernetes' CLI",
    "docker": "Docker's CLI",
    "tritonserver": "NVIDIA's server binary (its options are listed in EXTERNAL_OPTIONS)",
    "pip": "pip",
    "yolo": "Ultralytics' CLI",
    "git": "git",
    "apt-get": "Debian's package tool",
    "head": "coreutils",
    "echo": "the shell",
    "set": "the shell",
    "source": "the shell",
    "export": "the shell",
    "grep": "grep",
    "promtool": "Prometheus' rule tool",
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
    "--log-verbose": "tritonserver",
    # pip's, in docs/pipelines.md's wheel check.
    "--only-binary": "pip",
    "--python-version": "pip",
    "--platform": "pip",
    # pytest's, given to ./scripts/test.
    "-m": "pytest",
    "-s": "pytest",
    "-k": "pytest",
}
# Names of other projects the docs name in code spans (nothing here defines them).
EXTERNAL_NAMES = {
    "container_cpu_cfs_throttled_seconds_total": "cAdvisor's metric, read on the node",
    "nv_gpu_power_usage": "Triton's GPU power metric (the dashboard and rules use others)",
    "REJECTED": "a reason label Triton gives nv_inference_request_failure",
    "CANCELED": "a reason label Triton gives nv_inference_request_failure",
    "ModelInfer": "Triton's gRPC inference call",
    "GetMostOptimizedProfile": "a function of Triton's TensorRT backend",
    "ExecutionContextAllocationStrategy": "TensorRT's enum behind the backend's parameter",
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
print("\nPROBE " + json.dumps({"clis": facts, "heavy": sorted({m.split('.')[0] for m in sys.modules} & heavy)}))
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
    tensors.update(re.findall(r'Role\([^)]*\bname="([A-Z][A-Z0-9_]*)"', text))
    rules = yaml.safe_load((ROOT / "k8s" / "prometheusrule.yaml").read_text())
    alerts = {
        rule["alert"]: f"{rule['expr']} for: {rule.get('for', '')}"
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
    """The CamelCase words every alert's name starts with (``VisionServing``)."""
    common = []
    for words in zip(*(humps(name) for name in known.alerts)):
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
    least |= {"alerts": 12, "alert statements": 20, "figures": 250}
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
