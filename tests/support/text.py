"""Text edits and unified diffs for building test series: one copy each, shared by the tests and benches."""

from __future__ import annotations

import difflib


def edit(text: str, old: str, new: str) -> str:
    """``text`` with its single occurrence of ``old`` replaced by ``new`` (fails if not exactly one)."""
    assert text.count(old) == 1, (old, text[:80])
    return text.replace(old, new)


def udiff(path: str, old: str | None, new: str | None, context: int = 3) -> str:
    """A ``a/``/``b/`` unified diff of ``path`` from ``old`` to ``new`` (``None``: the file does not exist)."""
    a = [] if old is None else old.splitlines(keepends=True)
    b = [] if new is None else new.splitlines(keepends=True)
    before = "/dev/null" if old is None else f"a/{path}"
    after = "/dev/null" if new is None else f"b/{path}"
    return "".join(difflib.unified_diff(a, b, before, after, n=context))


def joined(text: str) -> str:
    """The output as a person reads it: a line ending in "/" continues on the next line."""
    out: list[str] = []
    for ln in text.splitlines():
        if out and out[-1].endswith("/"):
            out[-1] += ln.strip()
        else:
            out.append(ln.rstrip())
    return "\n".join(out)
