"""Loading user plugins: Python files that register their own subgraph properties.

Only files named on the command line (or by the server's ``--plugin``) are
imported; code is never loaded from an upload or a request.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

from .api import backend_names
from .errors import PluginError


def load_plugin(path: str | Path) -> list[str]:
    """Import ``path``; return the backends it registered (new names only)."""
    path = Path(path)
    if not path.is_file() or path.suffix != ".py":
        raise PluginError(f"plugin '{path}' is not a .py file; pass the path of a Python file that "
                          "calls register_subgraph_property")
    before = set(backend_names())
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    name = f"sglens_plugin_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugin '{path}' cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:
        # sys.exit() in a plugin would end the command with its code, silently: a plugin error.
        sys.modules.pop(name, None)
        raise PluginError(f"plugin '{path}' called sys.exit({exc.code!r}) on import; a plugin must only "
                          "register subgraph properties") from None
    except Exception as exc:  # noqa: BLE001 - user code: one line naming the file
        sys.modules.pop(name, None)
        text = str(exc).splitlines()[0] if str(exc) else ""
        raise PluginError(f"plugin '{path}' raised {type(exc).__name__} on import: {text}") from exc
    return sorted(set(backend_names()) - before)
