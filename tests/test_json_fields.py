"""``patchset.text.json_fields``: the one way the product's records write their JSON keys."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from patchset.engine.hunks import FileOutcome, HunkResults
from patchset.engine.results import FileResult, PatchResult
from patchset.text import json_fields


@dataclass
class _Inner:
    n: int

    def to_json(self) -> dict[str, int]:
        return {"n": self.n}


@dataclass
class _Outer:
    name: str
    inner: _Inner | None
    items: list[_Inner] = field(default_factory=list)
    tags: tuple[str, ...] = ()


def test_keys_come_in_the_order_named_not_the_order_of_the_fields() -> None:
    rec = _Outer("x", None, tags=("a",))
    assert list(json_fields(rec, "tags name inner")) == ["tags", "name", "inner"]
    # FileResult declares old_path last; its JSON names it fourth, as it always has
    fr = FileResult("b.py", "b/b.py", "rename", "applied", old_path="a.py")
    assert list(fr.to_json()) == ["path", "patch_path", "op", "old_path", "status", "message", "sha256", "hunks"]


def test_records_and_lists_of_records_are_written_by_their_to_json() -> None:
    rec = _Outer("x", _Inner(1), [_Inner(2), _Inner(3)], ("a", "b"))
    assert json_fields(rec, "name inner items tags") == {
        "name": "x",
        "inner": {"n": 1},
        "items": [{"n": 2}, {"n": 3}],
        "tags": ("a", "b"),  # plain values are kept as they are
    }


def test_a_lazy_sequence_of_hunk_results_becomes_a_list_even_when_empty() -> None:
    empty = HunkResults()
    assert json.loads(json.dumps(FileOutcome("applied", None, hunks=empty).to_json()))["hunks"] == []
    results = HunkResults()
    results.add("offset", offset=2, line=7)
    doc = PatchResult("p1", "applied", [FileResult("a.py", "a.py", "modify", "applied", hunks=results)]).to_json()
    assert doc["files"][0]["hunks"] == [results[0].to_json()]
    assert doc["files"][0]["hunks"][0]["offset"] == 2


def test_a_name_that_is_not_an_attribute_fails_loudly() -> None:
    with pytest.raises(AttributeError):
        json_fields(_Outer("x", None), "name nmae")
