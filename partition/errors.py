"""The one error hierarchy of Subgraph Lens.

Every error a user can cause (a bad file, a bad option, a selector that raises)
is a ``LensError``: the CLI prints its message on one line and exits 2, the web
API answers it as a 4xx JSON body. Messages name the node or tensor at fault and
say what to do about it.
"""

from __future__ import annotations


class LensError(Exception):
    """Base class of every error Subgraph Lens reports to a user."""

    #: HTTP status the web API answers with for this error.
    http_status: int = 400


class ModelError(LensError):
    """The model file is unreadable or its graph is malformed."""


class ModelTooLargeError(ModelError):
    """An upload or file is larger than the configured limit."""

    http_status = 413


class GraphCycleError(ModelError):
    """The graph has a cycle; names the nodes on it."""


class UnknownBackendError(LensError):
    """A backend name that is not registered."""

    http_status = 404


class SelectorError(LensError):
    """A user selector or property raised; names the call and the node."""


class PluginError(LensError):
    """A plugin file could not be imported."""


class PartitionCheckError(LensError):
    """``check_partition`` found a violation."""


class BackendOptionError(LensError):
    """An option a backend does not declare, or a value of the wrong type or range; names both."""
