"""The ``sglens`` command line: the one place where the three packages' commands are put together.

Each package defines its own subcommands with ``register(subparsers)``:
``partition/cli.py`` (partition, trace, check, groups), ``engine/run_cli.py``
(run, compare) and ``app/cli.py`` (serve). Start-up imports only the package
of the command given: ``sglens partition`` never imports Flask or onnxruntime
(a third of a second). The other commands appear in ``sglens --help`` from
``GROUPS``' names and help lines (a test checks they match the packages' own).

The package of the command given is imported normally: a missing dependency is
one line naming it, exit 2, never a silently missing command.

Every user error is one line on stderr and exit code 2, never a traceback
(set ``SGLENS_DEBUG=1`` to see one). ``sglens check`` exits 1 on a violation.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Callable, NoReturn, Sequence

EXIT_USAGE = 2


# Lazy imports, for start-up speed: each command imports only its own package (these
# are ordinary import statements, so tests/test_layering.py sees them as edges).
def _partition_commands() -> ModuleType:
    import partition.cli
    return partition.cli


def _engine_commands() -> ModuleType:
    import engine.run_cli
    return engine.run_cli


def _precision_commands() -> ModuleType:
    import engine.precision_cli
    return engine.precision_cli


def _app_commands() -> ModuleType:
    import app.cli
    return app.cli


@dataclass(frozen=True)
class CommandGroup:
    """The commands one module adds with ``register(subparsers)``, and their one-line help."""

    module: str                       # the module's name (what ``load`` imports)
    load: Callable[[], ModuleType]
    commands: dict[str, str]          # command -> help, shown by ``sglens --help`` without the import


#: In help order. The help lines must equal the ones the modules register (tests/test_sglens_cli.py).
GROUPS = (
    CommandGroup("partition.cli", _partition_commands, {
        "partition": "partition a model and print the subgraphs",
        "trace": "print every partitioning event as one JSON object per line",
        "check": "check the partition's invariants (exit 1 on a violation)",
        "groups": "a node's incompatibility groups (ancestors / descendants)",
        "gains": "tensorrt: rank the unsupported ops and nodes by what supporting them would gain",
    }),
    CommandGroup("engine.run_cli", _engine_commands, {
        "run": "run a model (optionally partitioned) on our engine",
        "compare": "compare onnxruntime, our engine and the partitioned graph",
    }),
    CommandGroup("engine.precision_cli", _precision_commands, {
        "precision": "find the nodes that must stay FP32 for FP16/BF16/INT8",
    }),
    CommandGroup("app.cli", _app_commands, {"serve": "start the web debugger"}),
)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2), like every other user error.

    Subcommand parsers inherit the class (``add_subparsers`` uses ``type(self)``).
    """

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None, *, full: bool = True) -> argparse.ArgumentParser:
    """The ``sglens`` parser.

    ``full``: every command with all its options (imports all three packages).
    Otherwise only ``command``'s group is imported and registered; the other
    commands are placeholders with their help line (enough for ``sglens --help``
    and for argparse to name the valid choices).
    """
    parser = _Parser(prog="sglens", description="Subgraph Lens: see how a model is partitioned")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        if full or command in group.commands:
            group.load().register(sub)
        else:
            for name, help_line in group.commands.items():
                sub.add_parser(name, help=help_line)
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the top-level parser has no options but -h)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if any(first in g.commands for g in GROUPS) else None


def missing_module_message(command: str | None, exc: ModuleNotFoundError) -> str:
    """One line naming the module that is not installed."""
    name = (exc.name or str(exc)).split(".")[0]
    who = f"sglens {command}" if command else "sglens"
    return (f"{who}: error: needs the Python package '{name}', which is not installed "
            f"(pip install {name})")


def main(argv: Sequence[str] | None = None, *, exit_when_done: bool = False) -> int:
    """Run one ``sglens`` command; its exit code.

    ``exit_when_done`` (the program, not a caller in Python): a command may end
    the process itself once its output is written (``args.exit_now``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_in(argv)
    try:
        parser = build_parser(command, full=False)
    except ModuleNotFoundError as exc:
        return _missing_module(command, exc)
    args = parser.parse_args(argv)
    if exit_when_done:
        args.exit_now = exit_now
    return _run(args, command)


def exit_now(code: int) -> NoReturn:
    """End the ``sglens`` program at once: output flushed, objects not freed.

    A partition of a 100k-node model leaves ~1M small objects; the interpreter
    would free them one by one on the way out, 0.2 s the user waits for while the
    OS takes the memory back at once anyway. Nothing else is skipped that a
    partition command needs: its files are written and closed before this.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # the reader went away, or the stream is closed
            pass
    os._exit(code)


def program() -> NoReturn:
    """The ``sglens`` program (the console script and ``python -m sglens``)."""
    # numpy's floating-point RuntimeWarnings raised in our kernels and reports (a log of 0, a
    # cast of inf, an FP16 overflow: expected in reduced precision and in -inf attention masks)
    # printed file:line noise between a command's lines (`sglens precision` on T5); the
    # comparisons report the numbers that matter. Only the program's process: a caller of
    # main() in Python keeps its own warning filters.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"engine(\.|$)")
    sys.exit(main(exit_when_done=True))


def _run(args: argparse.Namespace, command: str | None) -> int:
    from partition.errors import LensError  # lazy for start-up speed: `sglens --help` needs no package
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
    except ModuleNotFoundError as exc:  # a dependency a command imports when it runs
        return _missing_module(command, exc)
    except Exception as exc:  # noqa: BLE001 - the promise is one line, never a traceback
        if os.environ.get("SGLENS_DEBUG"):
            raise
        print(f"sglens: error: {type(exc).__name__}: {exc} (set SGLENS_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return EXIT_USAGE


def _missing_module(command: str | None, exc: ModuleNotFoundError) -> int:
    """One line naming the missing package, exit 2 (the traceback with SGLENS_DEBUG=1)."""
    if os.environ.get("SGLENS_DEBUG"):
        raise exc
    print(missing_module_message(command, exc), file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    program()
