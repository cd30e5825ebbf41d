"""The ``sglens`` command line: the one place where the three packages' commands are put together.

Each package defines its own subcommands with ``register(subparsers)``:
``partition/cli.py`` (partition, trace, check, groups), ``engine/run_cli.py``
(run, compare) and ``app/cli.py`` (serve). They are imported normally: a
missing dependency is an ImportError at start, not a silently missing command.

Every user error is one line on stderr and exit code 2, never a traceback
(set ``SGLENS_DEBUG=1`` to see one). ``sglens check`` exits 1 on a violation.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn, Sequence

import app.cli
import engine.run_cli
import partition.cli
from partition.errors import LensError

EXIT_USAGE = 2
#: the modules whose ``register(subparsers)`` add the subcommands, in help order
COMMAND_MODULES = (partition.cli, engine.run_cli, app.cli)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2), like every other user error.

    Subcommand parsers inherit the class (``add_subparsers`` uses ``type(self)``).
    """

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sglens", description="Subgraph Lens: see how a model is partitioned")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LensError as exc:
        print(f"sglens: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("sglens: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:  # only user code (a plugin's selector) exits inside a command
        print(f"sglens: error: plugin code called sys.exit({exc.code!r}); a plugin must not end the "
              "command", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (`sglens trace ... | head`): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - the promise is one line, never a traceback
        if os.environ.get("SGLENS_DEBUG"):
            raise
        print(f"sglens: error: {type(exc).__name__}: {exc} (set SGLENS_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
