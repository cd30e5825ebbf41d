"""Every element id a page is served with is unique: the pages' scripts find elements by id, and the
first of two wins (the precision page's inputs line shared its id with the .npz file input, so the
text went into the input, where no one saw it)."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
_ID = re.compile(r'\bid="([^"{}]+)"')   # literal ids (a Jinja-made one is not checked)


def _ids(name: str) -> list[str]:
    return _ID.findall((TEMPLATES / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", sorted(p.name for p in TEMPLATES.glob("*.html") if p.name != "base.html"))
def test_a_page_and_its_base_use_each_id_once(page: str) -> None:
    ids = _ids(page) + (_ids("base.html") if '{% extends "base.html" %}' in (TEMPLATES / page).read_text() else [])
    assert ids, page
    twice = sorted(i for i, n in collections.Counter(ids).items() if n > 1)
    assert twice == [], f"{page}: ids used twice: {twice}"
