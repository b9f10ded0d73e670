"""`spade-jax` command line. Each command group lives in its own module with `register(subparsers)`.

Modules are imported only for the command being run, so `spade-jax env-run` never imports JAX.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from spade_jax.envs.text import printable_line
from spade_jax.infra import malloc
from spade_jax.infra.shutdown import exit_now, stop_on_signals

# command name -> module (relative to spade_jax.cli) that registers it.
COMMANDS: dict[str, str] = {
    "sample": "sample",
    "convert": "model_cmds",
    "env-run": "env_cmds",
    "validate-env": "env_cmds",
    "export-envs": "env_cmds",
    "selfplay": "train_cmds",
    "warmstart": "train_cmds",
    "export-hf": "train_cmds",
    "eval": "eval_cmds",
    "eval-compare": "eval_cmds",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Builds the parser; with `only`, imports just the module that owns that command."""
    parser = argparse.ArgumentParser(prog="spade-jax", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = sorted(set(COMMANDS.values())) if only is None else [COMMANDS[only]]
    for name in modules:
        try:
            module = importlib.import_module(f"spade_jax.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"spade_jax.cli.{name}":
                continue  # command group not built yet
            raise
        module.register(sub)
    return parser


def _version() -> str:
    """The installed distribution's version (pyproject.toml's, for an editable install too)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spade-jax")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    command_line = argv is None
    if command_line:  # a real command line: restart with our malloc settings first (spade_jax.infra.malloc)
        malloc.reexec_with_tunables()
    argv = sys.argv[1:] if argv is None else argv
    for stream in (sys.stdout, sys.stderr):  # environment text a terminal's encoding lacks is shown escaped
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            reconfigure(errors="backslashreplace")
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    with stop_on_signals():
        try:
            return int(args.func(args) or 0)
        except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (Terminated): cleaned up on the way here
            signum = getattr(e, "signum", signal.SIGINT)
            print("interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)", file=sys.stderr)
            if command_line:
                exit_now(128 + signum)
            return 128 + signum
        except BrokenPipeError:  # `spade-jax ... | head`: the reader left; say nothing more, as `cat` would
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at interpreter exit
            return 128 + signal.SIGPIPE
        except (FileNotFoundError, ValueError) as e:
            # Bad input gets one clear line, not a traceback (SPADE_JAX_TRACEBACK=1: the whole traceback).
            if os.environ.get("SPADE_JAX_TRACEBACK") == "1":
                raise
            # What it quotes (file names, environment text) is shown escaped, on one line.
            print(f"spade-jax {args.command}: error: {printable_line(e)}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
