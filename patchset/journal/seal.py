"""This installation's seal: the key in the user's state directory and the HMAC made with it.

A journal is replayed only when it bears this seal (``patchset.journal``, "Ownership"), and every
other state patchset records and trusts again later is sealed the same way (``patchset.sealed``).
``shown_value`` is how a value from state that failed the check may be printed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import threading
from pathlib import Path
from typing import Any

from patchset.atomic import fsync_path
from patchset.errors import EnvironmentFailure
from patchset.journal.files import write_file

STATE_ENV = "PATCHSET_STATE"  # the directory that holds this installation's journal key
KEY_NAME = "journal.key"


def state_dir() -> Path:
    """Where this installation keeps its journal key: ``$PATCHSET_STATE``, else
    ``$XDG_STATE_HOME/patchset``, else ``~/.local/state/patchset``."""
    raw = os.environ.get(STATE_ENV, "").strip()
    if raw:
        return Path(raw).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME", "").strip()
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "state") / "patchset"


_keys: dict[str, bytes] = {}


def _read_key(path: Path) -> bytes | None:
    """The key in ``path`` (64 hex digits), or None when missing, unreadable or damaged."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        raw = os.read(fd, 256) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)
    text = raw.strip()
    return bytes.fromhex(text.decode()) if re.fullmatch(rb"[0-9a-f]{64}", text) else None


_key_lock = threading.Lock()


def installation_key(create: bool) -> bytes | None:
    """This installation's journal key (``create``: made on first use, durably); None when there is
    none yet (then no journal found anywhere is ours)."""
    path = state_dir() / KEY_NAME
    with _key_lock:  # threads of one process (verify --jobs) make the key once, not over each other
        key = _keys.get(str(path)) or _read_key(path)
        if key is None and create:
            key = _create_key(path)
        if key is not None:
            _keys[str(path)] = key
    return key


def _create_key(path: Path) -> bytes:
    if os.path.lexists(path):  # never replaced: a damaged key is the user's to look at
        raise EnvironmentFailure(
            f"{path}: patchset's journal key is damaged (not 64 hex digits)",
            hint="remove it and run the command again (journals it sealed will then be reported, not replayed)",
        )
    import secrets

    tmp = path.parent / f".{KEY_NAME}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp.unlink(missing_ok=True)
        write_file(tmp, secrets.token_hex(32).encode() + b"\n", 0o600)
        try:
            os.link(tmp, path)  # published whole or not at all; a concurrent first run keeps its own
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        fsync_path(path.parent, directory=True)
    except OSError as exc:
        raise EnvironmentFailure(
            f"{path}: cannot create patchset's journal key: {exc.strerror or exc}",
            hint=f"patchset seals every journal it writes with it: set ${STATE_ENV} to a writable directory",
        ) from None
    key = _read_key(path)
    if key is None:
        raise EnvironmentFailure(f"{path}: patchset's journal key is unreadable", hint=f"check {path.parent}")
    return key


def _mac(key: bytes, kind: str, body: dict[str, Any]) -> str:
    import hmac

    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, b"patchset journal 1\0" + kind.encode() + b"\0" + text.encode(), hashlib.sha256).hexdigest()


_SEAL = re.compile(r"[0-9a-f]{64}")


def seal_of(kind: str, body: dict[str, Any]) -> str:
    """This installation's seal of ``body`` as state of ``kind`` (the key is made on first use):
    what a journal carries as ``owner``, and every other state patchset records and trusts again
    later (``patchset.sealed``). ``kind`` says what the state is, so one kind is never taken for
    another."""
    key = installation_key(create=True)
    assert key is not None
    return _mac(key, kind, body)


def has_seal(kind: str, body: dict[str, Any], owner: object) -> bool:
    """Whether ``owner`` is this installation's seal of ``body`` as ``kind``: False when there is
    no key yet, and for anything that is not 64 hex digits (``hmac.compare_digest`` raises
    TypeError for a non-ASCII string). Raises RecursionError for a body nested too deep to hash."""
    import hmac

    if not isinstance(owner, str) or not _SEAL.fullmatch(owner):
        return False
    key = installation_key(create=False)
    return key is not None and hmac.compare_digest(owner, _mac(key, kind, body))


def shown_value(value: object) -> str:
    """A value from recorded state as it may be printed: quoted, control characters escaped, bounded."""
    if isinstance(value, str):
        return repr(value[:200] + ("..." if len(value) > 200 else ""))
    return f"<{type(value).__name__}>"
