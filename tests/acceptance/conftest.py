"""Fixtures of the acceptance suite (``acceptance_harness.py`` has the steps); every test here is
marked ``acceptance`` (``pytest -m acceptance`` or ``make acceptance`` runs the suite alone)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from acceptance_harness import serve, stop_server  # noqa: E402


def pytest_collection_modifyitems(items: list) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.acceptance)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Any:
    """One server per module (Dask start-up costs seconds)."""
    cwd = tmp_path_factory.mktemp("accept")
    srv = serve(cwd)
    yield srv
    stop_server(srv)
