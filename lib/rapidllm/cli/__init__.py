"""Command line: predict, sweep, search, validate, gemm, collective, calibrate, explore.

One module per command, each with `add_parser(subparsers)` registering its flags and `run(args)`. Bad input
(spec files, flags, unreadable or unwritable paths) is a SpecError everywhere: `main` prints its lines (file:
key: what is allowed) to stderr and exits 2, with nothing on stdout and no traceback. `--json` output uses
stable snake_case keys with SI units in their names and is strict JSON (null where a value does not apply).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from rapidllm.cli import calibrate, collective, explore, gemm, predict, search, sweep, validate
from rapidllm.cli.predict import JSON_KEYS
from rapidllm.spec.errors import SpecError

COMMANDS = (predict, sweep, search, validate, gemm, collective, calibrate, explore)

__all__ = ["JSON_KEYS", "build_parser", "main"]


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (argparse prints the whole usage first, up to 8 lines)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="rapidllm", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=_Version, nargs=0, help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


class _Version(argparse.Action):
    """`--version`: the installed distribution's version (pyproject.toml), looked up only when asked (the
    metadata scan would otherwise add to every command's start)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> NoReturn:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("rapidllm")
        except PackageNotFoundError:
            found = "unknown (not installed)"
        print(f"rapidllm {found}")
        parser.exit(0)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SpecError as err:
        print(str(err), file=sys.stderr)
        return 2
    except BrokenPipeError:             # `rapidllm ... | head`: the reader left; quiet, as a Unix tool is
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # (no second error at exit's flush)
        return 128 + 13                 # the status a shell reports for a SIGPIPE
