"""Backend registries and the one option schema each backend declares.

A ``BackendRegistry`` maps a backend name to either a list of registered
properties (``register_subgraph_property``) or a factory building them from
options (``register_backend_factory``), together with the backend's options
(``BackendOption``: name, type, default, help, choices). The schema is the only
place a backend's options are written down: the CLI flags
(``partition.selection``), the API's validation (``validate``) and the web
form (``GET /api/backends``) are generated from it, and an option not in the
schema is an error everywhere.

There is one process-wide default registry (the command line uses it); the
web app holds its own copy of the built-ins so backends registered by one
app's plugins never show up in another app in the same process. The module
functions of ``partition.api`` act on the *current* registry: the default one,
or the one made current with ``use_registry`` (how a plugin file imported by
an app registers into that app's registry).

This module imports nothing else of ``partition`` but its errors: it sits
under ``api.py`` so neither needs the other at import time.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, Sequence

from .errors import BackendOptionError, UnknownBackendError

#: Option types a schema may declare; ``str_list`` accepts a list or a comma-separated string.
OPTION_TYPES = ("int", "float", "bool", "str", "str_list")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class BackendOption:
    """One option of a backend: what the CLI flag, the API and the web form all read."""

    name: str
    type: str
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] | None = None
    minimum: int | float | None = None
    #: an extra CLI spelling kept for compatibility: for a bool it sets the opposite of the default
    #: (``--keep-data-dependent``), otherwise it names the same flag; ``--NAME`` and ``--opt NAME=VALUE``
    #: always exist.
    flag: str | None = None

    def __post_init__(self) -> None:
        if self.type not in OPTION_TYPES:
            raise ValueError(f"option {self.name!r}: type must be one of {', '.join(OPTION_TYPES)}")

    def to_json(self) -> dict[str, Any]:
        default = list(self.default) if isinstance(self.default, tuple) else self.default
        data: dict[str, Any] = {"name": self.name, "type": self.type, "default": default, "help": self.help}
        if self.choices is not None:
            data["choices"] = list(self.choices)
        if self.minimum is not None:
            data["minimum"] = self.minimum
        return data

    def coerce(self, backend: str, value: Any) -> Any:
        """``value`` (native, or a string from a command line or a form) as this option's type."""
        where = f"backend '{backend}': {self.name}"
        converted = _convert(self.type, value)
        if converted is None:
            raise BackendOptionError(f"{where} must be {_TYPE_WORDS[self.type]}, got {value!r}")
        if self.choices is not None and converted not in self.choices:
            raise BackendOptionError(f"{where} must be one of {', '.join(self.choices)}, got {converted!r}")
        if self.minimum is not None and converted < self.minimum:
            raise BackendOptionError(f"{where} must be at least {self.minimum}, got {converted}")
        return converted


_TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
               "str_list": "a list of strings (or one comma-separated string)"}


def _convert(kind: str, value: Any) -> Any:
    """The converted value, or None when ``value`` cannot be one of ``kind``."""
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        return True if text in _TRUE else False if text in _FALSE else None
    if kind == "int":
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        try:
            return int(str(value).strip())
        except ValueError:
            return None
    if kind == "float":
        try:
            return None if isinstance(value, bool) else float(value)
        except (TypeError, ValueError):
            return None
    if kind == "str":
        return value if isinstance(value, str) else None
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        # Names never hold commas (op types, plugin names): "A,B" and ["A", "B"] mean the same.
        return [part.strip() for v in value for part in v.split(",") if part.strip()]
    return None


@dataclass
class _Entry:
    """One backend: its registered properties or its factory, and its option schema."""

    options: tuple[BackendOption, ...] = ()
    properties: list[Any] = field(default_factory=list)
    factory: Callable[..., list[Any]] | None = None
    #: a sentence for an option name users often try on this backend (e.g. ``ops`` on tensorrt)
    hints: dict[str, str] = field(default_factory=dict)


class BackendRegistry:
    """Backends by name, each with its options; copy it to give an app its own."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def copy(self) -> "BackendRegistry":
        other = BackendRegistry()
        other._entries = {name: _Entry(e.options, list(e.properties), e.factory, dict(e.hints))
                          for name, e in self._entries.items()}
        return other

    def add_property(self, backend: str, prop: Any) -> None:
        """Append ``prop``; a backend registered this way takes no options (a factory can declare some)."""
        entry = self._entries.get(backend)
        if entry is None or entry.factory is not None:
            entry = self._entries[backend] = _Entry()
        entry.properties.append(prop)

    def add_factory(self, backend: str, factory: Callable[..., list[Any]],
                    options: Sequence[BackendOption] = (), hints: dict[str, str] | None = None) -> None:
        self._entries[backend] = _Entry(tuple(options), [], factory, dict(hints or {}))

    def remove(self, backend: str) -> None:
        self._entries.pop(backend, None)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def _entry(self, backend: str) -> _Entry:
        entry = self._entries.get(backend)
        if entry is None:
            raise UnknownBackendError(f"unknown backend '{backend}'; known: {', '.join(self.names()) or 'none'}")
        return entry

    def schema(self, backend: str) -> list[BackendOption]:
        return list(self._entry(backend).options)

    def validate(self, backend: str, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` coerced to their declared types, with the defaults of the ones not given."""
        entry = self._entry(backend)
        known = {o.name: o for o in entry.options}
        for name in options:
            if name not in known:
                raise BackendOptionError(_unknown_message(backend, name, entry))
        return {o.name: o.coerce(backend, options[o.name]) if o.name in options else _fresh(o.default)
                for o in entry.options}

    def select(self, backend: str, options: Mapping[str, Any] | None = None) -> "Selection":
        """The one place options are checked: ``options`` (native values, or strings from a command
        line, a form or JSON) validated against ``backend``'s schema into a frozen ``Selection``."""
        values = self.validate(backend, dict(options or {}))
        return Selection(backend, MappingProxyType({k: _frozen(v) for k, v in values.items()}))

    def build(self, selection: "Selection") -> list[Any]:
        """The properties of a validated selection, in run order; the factory re-checks nothing."""
        entry = self._entry(selection.backend)
        if entry.factory is not None:
            return list(entry.factory(**selection.values()))
        return list(entry.properties)  # no schema, so the selection holds no options


@dataclass(frozen=True)
class Selection:
    """A backend and its options, validated once at the edge (CLI flags, the web API, a library call)
    into coerced values with every default filled in; it travels unchanged to the factory, to a Dask
    worker (plain data: it pickles) and into reports. Make one with ``BackendRegistry.select``."""

    backend: str
    options: Mapping[str, Any]

    def values(self) -> dict[str, Any]:
        """The options as keyword arguments (lists as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.options.items()}

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "options": self.values()}

    def __reduce__(self) -> tuple[Any, ...]:  # a mappingproxy does not pickle; a plain dict does
        return (_selection, (self.backend, dict(self.options)))


def _selection(backend: str, options: dict[str, Any]) -> Selection:
    return Selection(backend, MappingProxyType(options))


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _fresh(default: Any) -> Any:
    return list(default) if isinstance(default, (list, tuple)) else default


def _unknown_message(backend: str, name: str, entry: _Entry) -> str:
    hint = entry.hints.get(name)
    if hint:
        return f"backend '{backend}' has no option {name}: {hint}"
    valid = ", ".join(o.name for o in entry.options)
    return (f"backend '{backend}' has no option {name}; "
            + (f"its options are {valid}" if valid else "it takes no options"))


DEFAULT_REGISTRY = BackendRegistry()
_CURRENT: contextvars.ContextVar[BackendRegistry] = contextvars.ContextVar("sglens_registry",
                                                                          default=DEFAULT_REGISTRY)


def current_registry() -> BackendRegistry:
    """The registry the ``partition.api`` functions act on (the default unless ``use_registry``)."""
    return _CURRENT.get()


@contextlib.contextmanager
def use_registry(registry: BackendRegistry) -> Iterator[BackendRegistry]:
    """Make ``registry`` current in this thread for the block (e.g. while importing an app's plugins)."""
    token = _CURRENT.set(registry)
    try:
        yield registry
    finally:
        _CURRENT.reset(token)
