"""``@record`` behaves as ``@dataclass`` (the standard library is the oracle): the same equality,
ordering, hashing and repr, on the same class bodies, compared side by side."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

import pytest

from patchset.records import record


def both(body: dict[str, Any], annotations: dict[str, str], **opts: Any) -> tuple[type, type]:
    """The same class made by ``dataclass`` and by ``record``."""
    made = []
    for deco in (dataclasses.dataclass, record):
        ns = {"__annotations__": dict(annotations), **body}
        cls = type("Thing", (), ns)
        made.append(deco(**opts)(cls) if opts else deco(cls))
    return made[0], made[1]


CASES: list[tuple[dict[str, Any], dict[str, str], dict[str, Any]]] = [
    ({}, {"a": "int", "b": "str"}, {}),
    ({}, {"a": "int"}, {"frozen": True}),
    ({}, {"a": "int", "b": "int"}, {"frozen": True, "order": True}),
    ({"b": field(default=0, compare=False)}, {"a": "int", "b": "int"}, {}),
    ({"b": field(default=0, repr=False)}, {"a": "int", "b": "int"}, {}),
    ({}, {}, {}),
    ({}, {}, {"frozen": True}),
    ({"__hash__": lambda self: 7}, {"a": "int"}, {}),
    ({"__eq__": lambda self, o: True}, {"a": "int"}, {"frozen": True}),
    ({"__repr__": lambda self: "mine"}, {"a": "int"}, {}),
]
VALUES = [(1, 0), (1, 0), (2, 0), (1, 5), (0, 9)]


@pytest.mark.parametrize("body,annotations,opts", CASES)
def test_record_matches_dataclass(body: dict[str, Any], annotations: dict[str, str], opts: dict[str, Any]) -> None:
    d_cls, r_cls = both(body, annotations, **opts)
    n = len(annotations)
    ds = [d_cls(*v[:n]) for v in VALUES]
    rs = [r_cls(*v[:n]) for v in VALUES]
    assert dataclasses.is_dataclass(r_cls)
    assert [f.name for f in dataclasses.fields(r_cls)] == [f.name for f in dataclasses.fields(d_cls)]
    for d1, r1 in zip(ds, rs, strict=True):
        assert repr(r1) == repr(d1)
        assert dataclasses.asdict(r1) == dataclasses.asdict(d1)
        assert (r1.__hash__ is None) == (d1.__hash__ is None)
        if d1.__hash__ is not None and "__hash__" in d_cls.__dict__:
            assert hash(r1) == hash(d1) or not opts.get("frozen")
        for d2, r2 in zip(ds, rs, strict=True):
            assert (r1 == r2) == (d1 == d2)
            assert (r1 != r2) == (d1 != d2)
            if opts.get("order"):
                assert [r1 < r2, r1 <= r2, r1 > r2, r1 >= r2] == [d1 < d2, d1 <= d2, d1 > d2, d1 >= d2]
        assert (r1 == object()) == (d1 == object())
        if "__eq__" not in body:
            assert r1.__eq__(d1) is NotImplemented and d1.__eq__(r1) is NotImplemented
    if opts.get("frozen") and d_cls.__hash__ is not None:
        assert {hash(r) for r in rs[:2]} == {hash(rs[0])}  # equal records hash alike
        with pytest.raises(dataclasses.FrozenInstanceError):
            rs[0].a = 3


def test_a_frozen_record_hashes_as_the_dataclass() -> None:
    d_cls, r_cls = both({}, {"a": "int", "b": "str"}, frozen=True)
    assert hash(r_cls(1, "x")) == hash(d_cls(1, "x")) == hash((1, "x"))


def test_repr_of_a_record_holding_itself_stops() -> None:
    d_cls, r_cls = both({}, {"a": "Any"})
    d, r = d_cls(None), r_cls(None)
    d.a, r.a = [d], [r]
    assert repr(r) == repr(d) == "Thing(a=[...])"


def test_subclass_compares_its_own_fields_and_not_with_its_parent() -> None:
    @record
    class Base:
        a: int

    @record
    class Sub(Base):
        b: int = 0

    assert Sub(1, 2) == Sub(1, 2) and Sub(1, 2) != Sub(1, 3)
    assert (
        Base(1) != Sub(1)
        and repr(Sub(1, 2)) == "test_subclass_compares_its_own_fields_and_not_with_its_parent.<locals>.Sub(a=1, b=2)"
    )


def test_order_without_eq_is_refused_like_dataclass() -> None:
    with pytest.raises(ValueError):
        record(eq=False, order=True)(type("T", (), {"__annotations__": {"a": "int"}}))
    with pytest.raises(ValueError):
        dataclasses.dataclass(eq=False, order=True)(type("T", (), {"__annotations__": {"a": "int"}}))
