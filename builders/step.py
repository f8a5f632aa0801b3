"""The one shape of every command-line step of ``python -m builders`` (as Polygraphy's tools have one): its name and
help, its options, the pipelines it works on, and its run.

A step's options and run are functions of its own module, named ``"module:function"`` and imported only when the
step is chosen: ``python -m builders --help`` imports none of them, and a step's ``--help`` imports only its own.
A Python package a step needs and this environment lacks (TensorRT, ModelOpt, PyTorch) is one ``error:`` line
naming it, never a traceback. Errors are one line; exit codes: 0 success, 1 a check failed, 2 a user error.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from builders import BuildError, arguments
from vision_serving import layout
from vision_serving.model_config import ConfigError


def _function(reference: str) -> Callable[..., Any]:
    module, name = reference.split(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Step:
    name: str
    help: str
    description: str
    # "module:function": ``(parser) -> None`` adds the step's own options, ``(args) -> int`` runs it.
    options: str
    run: str
    # How it picks the pipelines it works on (builders.arguments): the chosen one loaded, every one in turn, or its own.
    pipelines: Callable[[argparse.Namespace], None] = arguments.load_one
    # Whether it takes --pipeline and --model-repository (a step that makes a pipeline names it otherwise).
    common: bool = True

    def add(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser, chosen: bool) -> None:
        """Its subparser; its own options only when it is the step being parsed (``chosen``)."""
        parser = subparsers.add_parser(self.name, parents=[common] if self.common else [], help=self.help, description=self.description)
        if chosen:
            _function(self.options)(parser)
        parser.set_defaults(step_declaration=self)

    def execute(self, args: argparse.Namespace) -> int:
        """Run the parsed step: one ``error:`` line and an exit code instead of a traceback."""
        try:
            self.pipelines(args)
            return int(_function(self.run)(args))
        except BuildError as error:
            print(f"error: {arguments.one_line(error)}", file=sys.stderr)
            return error.exit_code
        except (ConfigError, layout.LayoutError, OSError) as error:
            print(f"error: {arguments.one_line(error)}", file=sys.stderr)
            return 2
        except ModuleNotFoundError as error:
            print(f"error: {self.name} needs the Python package {error.name!r}, which this environment lacks", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            return 130


def parser(prog: str, description: str, steps: tuple[Step, ...], chosen: str | None) -> argparse.ArgumentParser:
    """The command line of ``steps``, with the options of ``chosen`` (None: every step's, for the docs' checks)."""
    top = argparse.ArgumentParser(prog=prog, description=description)
    subparsers = top.add_subparsers(title="steps", dest="step", required=True, metavar="STEP")
    common = arguments.common_options()
    for step in steps:
        step.add(subparsers, common, chosen is None or step.name == chosen)
    return top


def main(prog: str, description: str, steps: tuple[Step, ...], argv: list[str]) -> int:
    """Parse ``argv`` with only the chosen step's options built, and run it."""
    names = {step.name for step in steps}
    # No arguments: the usage error, with every step's options built (what a reader of the parsers sees).
    chosen = next((item for item in argv if item in names), "") if argv else None
    args = parser(prog, description, steps, chosen).parse_args(argv)
    declaration: Step = args.step_declaration
    return declaration.execute(args)
