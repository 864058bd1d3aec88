"""``@record``: a ``@dataclass`` that loads fast.

Python 3.11's ``dataclasses`` writes the source of every generated method and compiles each one
on its own when the module loads (3.13 compiles a class's methods at once). On the CI machine's
interpreter one such compile costs about 0.25 ms, and a command loads 60 to 120 of them: a third
of what ``patchset list`` spends after ``import click`` (``bench/cli.py``). ``__init__`` is still
generated, since every instance runs it; ``__repr__``, ``__eq__``, ordering and a frozen record's
``__hash__`` are one shared implementation each, with the semantics ``dataclasses`` documents:
fields compared as a tuple, in order, only with an instance of the same class (else
``NotImplemented``); ``repr`` of the ``repr=True`` fields; a record with ``eq`` and without
``frozen`` is unhashable unless its class body defines ``__hash__``.

A record is a dataclass: ``fields``, ``asdict``, ``replace`` and type checkers see it as one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from operator import attrgetter
from reprlib import recursive_repr
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:  # in typing from 3.11; checkers read typing_extensions' (a PyGithub dependency)
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda f: f


T = TypeVar("T", bound=type)

_KEY = "__record_key__"  # per class: attrgetter of the compared fields, built on first use


def _key(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    getter = cls.__dict__.get(_KEY)
    if getter is None:
        names = [f.name for f in dataclasses.fields(cls) if f.compare]
        if len(names) > 1:
            getter = attrgetter(*names)
        elif names:
            one = attrgetter(names[0])

            def getter(obj: Any) -> tuple[Any, ...]:
                return (one(obj),)
        else:

            def getter(obj: Any) -> tuple[Any, ...]:
                return ()

        setattr(cls, _KEY, getter)
    return getter


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    key = _key(self.__class__)
    return key(self) == key(other)


def _compare(op: str) -> Callable[[Any, Any], Any]:
    def method(self: Any, other: Any) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        key = _key(self.__class__)
        return getattr(key(self), op)(key(other))

    method.__name__ = op
    return method


def _hash(self: Any) -> int:
    return hash(_key(self.__class__)(self))


@recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr)
    return f"{self.__class__.__qualname__}({shown})"


_ORDER = {name: _compare(name) for name in ("__lt__", "__le__", "__gt__", "__ge__")}


def _finish(cls: T, *, eq: bool, order: bool, frozen: bool, repr: bool) -> T:
    own = cls.__dict__
    if repr and "__repr__" not in own:
        cls.__repr__ = _repr  # type: ignore[assignment]
    if eq:
        if "__eq__" not in own:
            cls.__eq__ = _eq  # type: ignore[assignment]
        # dataclasses' rule (eq, no unsafe_hash): a __hash__ the class body wrote stays; else a frozen
        # record hashes its compared fields and a mutable one is unhashable
        written = own.get("__hash__", None) is not None or ("__hash__" in own and "__eq__" not in own)
        if not written:
            cls.__hash__ = _hash if frozen else None  # type: ignore[assignment]
    if order:
        for name, method in _ORDER.items():
            if name in own:
                raise TypeError(f"cannot overwrite attribute {name} in class {cls.__name__}")
            setattr(cls, name, method)
    return cls


@overload
@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: T, /) -> T: ...
@overload
def record(*, eq: bool = True, order: bool = False, frozen: bool = False, repr: bool = True) -> Callable[[T], T]: ...


def record(
    cls: T | None = None, /, *, eq: bool = True, order: bool = False, frozen: bool = False, repr: bool = True
) -> T | Callable[[T], T]:
    """``@record`` or ``@record(frozen=True, order=True, …)``: as ``@dataclass`` with those options."""

    def wrap(c: T) -> T:
        if order and not eq:
            raise ValueError("eq must be true if order is true")
        dataclasses.dataclass(repr=False, eq=False, order=False, frozen=frozen)(c)  # returns c itself
        return _finish(c, eq=eq, order=order, frozen=frozen, repr=repr)

    return wrap if cls is None else wrap(cls)
