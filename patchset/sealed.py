"""Recorded state that patchset trusts again later only when this installation wrote it.

A ledger directory is often a git repository, and a clone carries its ``.patchset/``: a rebase in
progress, its backups, the gate's memory. Replaying such a file would write bytes someone else
chose. So each is JSON carrying this installation's seal (``owner``: the journals' HMAC over the
body and the *kind* of state) and is read back by :func:`read_sealed` only as a bounded regular
file holding a JSON object whose seal verifies; anything else is
:class:`~patchset.errors.ForeignState` (exit 2) and left alone. A seal says who wrote a file, not
that it is well-formed: its reader still checks its shape.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from patchset import atomic
from patchset.errors import ForeignState
from patchset.journal.seal import has_seal, seal_of, shown_value

OWNER = "owner"  # the key the seal is kept under, as in journals
MAX_STATE = 256 << 20  # bytes: patchset's own state files are far smaller
_LISTED = 6  # values named in a refusal


def sealed_json(kind: str, body: dict[str, Any], *, keep_order: bool = False) -> bytes:
    """``body`` with this installation's seal as ``kind``, as the bytes of a state file (for a
    caller that writes it together with other files). ``keep_order``: the tables keep their key
    order (the seal is made over a canonical form either way)."""
    return json.dumps({**body, OWNER: seal_of(kind, body)}, indent=1, sort_keys=not keep_order).encode()


def write_sealed(path: Path, kind: str, body: dict[str, Any], *, durable: bool = True) -> None:
    """Write ``body`` with this installation's seal as ``kind`` to ``path``, atomically."""
    atomic.write_bytes(path, sealed_json(kind, body), durable=durable)


def shown_path(path: Path | str) -> str:
    text = str(path)
    return text if text.isprintable() else repr(text)


def foreign(path: Path | str, what: str, why: str, names: list[object] | None = None, *, hint: str) -> ForeignState:
    """The refusal of a state file: ``<path>: <what> not written by this installation (<why>);
    it names <first values>; it was left alone, nothing was changed``."""
    message = f"{shown_path(path)}: {what} not written by this installation ({why})"
    if names:
        shown = [shown_value(v) for v in names[:_LISTED]]
        if len(names) > _LISTED:
            shown.append(f"and {len(names) - _LISTED} more")
        message += "; it names " + ", ".join(shown)
    return ForeignState(message + "; it was left alone, nothing was changed", hint=hint)


def read_fd(fd: int, limit: int) -> bytes | None:
    """The bytes of the open file ``fd`` (closed here), or None when it is not a regular file of
    at most ``limit`` bytes, also when it grew past that while read."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(1 << 20, left))):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data if len(data) <= limit else None


def target_names(doc: dict[str, Any], detail: Callable[[dict[str, Any]], list[object]]) -> list[object]:
    """What a foreign state of per-target records names, for the refusal: each target and what
    ``detail`` picks from its record (all the keys when there is no ``targets`` table)."""
    targets = doc.get("targets")
    if not isinstance(targets, dict):
        return list(doc)
    out: list[object] = []
    for name, record in targets.items():
        out.append(name)
        if isinstance(record, dict):
            out.extend(detail(record))
    return out


def read_sealed(
    path: Path,
    kind: str,
    *,
    what: str,
    hint: str,
    names: Callable[[dict[str, Any]], list[object]] | None = None,
    max_bytes: int = MAX_STATE,
) -> dict[str, Any] | None:
    """The body of the state file at ``path`` (without its seal), or None when there is none.

    ``what`` names the state in the message (``"a rebase journal"``), ``hint`` says what to do
    with a foreign one, ``names(doc)`` picks the values worth showing from a foreign document.
    Raises :class:`ForeignState` for anything this installation did not seal as ``kind``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        why = "it is a symbolic link" if os.path.islink(path) else f"it cannot be read: {exc.strerror}"
        raise foreign(path, what, why, hint=hint) from None
    raw = read_fd(fd, max_bytes)
    if raw is None:
        raise foreign(path, what, f"not a regular file of at most {max_bytes >> 20} MiB", hint=hint)
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise foreign(path, what, "not readable JSON: damaged, or not patchset's", hint=hint) from None
    if not isinstance(doc, dict):
        raise foreign(path, what, "not a JSON object", hint=hint)
    owner = doc.get(OWNER)
    body = {k: v for k, v in doc.items() if k != OWNER}
    try:
        listed = names(doc) if names is not None else list(body)
    except (TypeError, ValueError, AttributeError, KeyError):
        listed = list(body)
    if owner is None:
        raise foreign(path, what, "it carries no seal", listed, hint=hint)
    try:
        ours = has_seal(kind, body, owner)
    except RecursionError:
        ours = False
    if not ours:
        raise foreign(path, what, "its seal is not this installation's", listed, hint=hint)
    return body
