"""tests/conftest.py puts the files of tests marked `longest` first, keeping every other order: in worker
processes a long file then starts at once instead of last."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests.conftest import pytest_collection_modifyitems


def _item(path: str, name: str, longest: bool = False):
    return SimpleNamespace(path=Path(path), name=name,
                           get_closest_marker=lambda m: object() if (m == "longest" and longest) else None)


def test_a_longest_file_moves_first_whole_and_the_rest_keep_their_order():
    items = [_item("a.py", "a1"), _item("b.py", "b1"), _item("c.py", "c1"),
             _item("c.py", "c2", longest=True), _item("d.py", "d1"), _item("e.py", "e1", longest=True)]
    pytest_collection_modifyitems(None, None, items)
    assert [i.name for i in items] == ["c1", "c2", "e1", "a1", "b1", "d1"]


def test_the_marker_is_registered(pytestconfig):
    assert any(line.startswith("longest:") for line in pytestconfig.getini("markers"))
