"""The command-line options that choose a partition, generated from the backends' option schemas.

Shared by ``sglens partition|trace|check|groups`` and by ``sglens run|compare``
(``engine/run_cli.py``). Every option a built-in backend declares gets a flag
``--NAME`` (underscores as dashes) taking a string that the schema converts;
``--opt NAME=VALUE`` (repeatable) reaches any option, including those of
plugin backends, which are only known once ``--plugin`` files are imported.
A ``BackendOption.flag`` is an older spelling kept working: for a boolean it
sets the opposite of the default (``--keep-data-dependent`` means
``exclude_data_dependent=false``), otherwise it is a second name of the flag.
List options repeat (``--fallback-ops A --fallback-ops B``) or take ``A,B``.

Options are checked against the chosen backend's schema, once, into a frozen
``Selection`` (``selection_from_args``): one not declared is an error naming
it and the valid ones. Every command hands that Selection on unchanged.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .backends import suggested_ops
from .errors import BackendOptionError
from .ir import Graph
from .plugins import load_plugin
from .registry import DEFAULT_REGISTRY, BackendOption, BackendRegistry, Selection, current_registry

_DEST = "backend_option_"


def _flag_options(registry: BackendRegistry) -> list[tuple[BackendOption, list[str]]]:
    """Each option name once (first declaration wins for type and help), with the backends declaring it."""
    seen: dict[str, tuple[BackendOption, list[str]]] = {}
    for backend in registry.names():
        for option in registry.schema(backend):
            seen.setdefault(option.name, (option, []))[1].append(backend)
    return list(seen.values())


def add_selection_options(parser: argparse.ArgumentParser, backend_default: str | None = "default",
                          registry: BackendRegistry | None = None) -> None:
    """MODEL, ``--backend``, ``--plugin``, ``--opt`` and one flag per option of the registry's backends."""
    registry = registry or DEFAULT_REGISTRY
    parser.add_argument("model", help="path of an ONNX model")
    parser.add_argument("--backend", default=backend_default, help="registered backend name " + (
        "(default: run unpartitioned)" if backend_default is None else f"(default: {backend_default})"))
    parser.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                        help="Python file registering its own subgraph properties (repeatable)")
    parser.add_argument("--opt", action="append", default=[], metavar="NAME=VALUE",
                        help="a backend option by its schema name (repeatable; works for plugin backends)")
    group = parser.add_argument_group("backend options (each applies to the backends named in brackets)")
    for option, backends in _flag_options(registry):
        dest = _DEST + option.name
        where = f"[{', '.join(backends)}]"
        extra = f"; one of {', '.join(option.choices)}" if option.choices else ""
        names = ["--" + option.name.replace("_", "-")]
        if option.flag and option.type != "bool":
            names.append(option.flag)  # an older spelling of the same flag
        if option.type == "str_list":  # repeatable, and each value may be comma-separated
            group.add_argument(*names, dest=dest, default=None, action="append", metavar="A,B",
                               help=f"{where} {option.help} (repeatable)")
        else:
            group.add_argument(*names, dest=dest, default=None, metavar=option.type.upper(),
                               help=f"{where} {option.help}{extra}")
        if option.flag and option.type == "bool":
            const = not option.default
            group.add_argument(option.flag, dest=dest, action="store_const", const=const,
                               help=f"{where} same as --opt {option.name}={str(const).lower()}")


def _text(value: Any) -> str:
    return ",".join(value) if isinstance(value, list) else str(value)


def parse_opt(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise BackendOptionError(f"--opt {text!r}: expected NAME=VALUE, e.g. --opt min_size=3")
    return name.strip(), value


def selection_from_args(args: argparse.Namespace, graph: Graph | None = None,
                        notes: list[str] | None = None) -> Selection | None:
    """The backend and options given on the command line, validated against ``args.backend``'s
    schema into a ``Selection``; None when neither a backend nor an option was given (``sglens run``
    unpartitioned); options without ``--backend`` are the ``default`` backend's. The ``default``
    backend without ``--ops`` takes ``graph``'s most frequent compute op types, as the model page
    guesses them (``backends.suggested_ops``), and says so: into ``notes`` when given (``sglens
    run|compare|precision`` print their notes after a run, so a failing run still ends in one
    line), else on stderr.

    Imports the ``--plugin`` files first (they may register the backend).
    """
    for plugin in args.plugin:
        load_plugin(plugin)
    options: dict[str, Any] = {}
    for key, value in vars(args).items():
        if key.startswith(_DEST) and value is not None:
            options[key[len(_DEST):]] = value
    for text in args.opt:
        name, value = parse_opt(text)
        if name in options and _text(options[name]).lower() != value.lower():
            raise BackendOptionError(f"option {name} is given twice ({options[name]!r} and {value!r})")
        options[name] = value
    if not args.backend and not options:
        return None   # sglens run/compare without a backend: unpartitioned
    # ``sglens run m.onnx --ops Conv,Relu`` means the default backend with those ops (the flags
    # belong to it); an option it does not declare is the usual error naming the valid ones
    backend, registry = args.backend or "default", current_registry()
    if backend == "default" and "ops" not in options and graph is not None \
            and any(o.name == "ops" for o in registry.schema(backend)):
        guess = suggested_ops(graph.op_counts())
        if guess:
            options["ops"] = guess
            said = (f"backend 'default' without --ops: partitioning the model's most frequent compute "
                    f"op types {','.join(guess)} (pass --ops to choose)")
            if notes is not None:
                notes.append(said)
            else:
                print(f"sglens: {said}", file=sys.stderr)
    return registry.select(backend, options)
