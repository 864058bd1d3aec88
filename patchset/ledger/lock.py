"""The lock (``patches.lock`` beside the ledger): hashes the tool writes, never a human.

It records the sha256 of every patch body, the head a fetched body came from, and per target the
sha256 of every patched file before (``base_files``) and after (``files``) the series. The
per-target hashes convert to and from the ``EXPECTED.sha256`` format (``<sha256>  <path>``).

Every file key is a path under a tree that ``build`` and ``apply`` read and write, so it is
checked with ``patchset.confine.check_relative`` when the lock is read and when an
``EXPECTED.sha256`` line is read (naming the file and line): a key never climbs out with ``..``,
is never absolute and never names ``.git`` or patchset's own state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from patchset.confine import check_relative
from patchset.errors import LedgerError, Location, UnsafePathError
from patchset.ledger.model import SCHEMA_VERSION, Lock, TargetLock
from patchset.ledger.schema import SHA256_RE, SHA_RE
from patchset.ledger.tomlio import Locator, parse

HEADER = "Written by patchset: do not edit by hand (use `patchset apply --update-lock`, `import`, `fetch`)."


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``: the one digest helper of the project (lock, trees, rebase state)."""
    import hashlib  # loaded when something is hashed, not when a ledger is read

    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks (release archives can be large)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


REGENERATE = (
    "the lock is written by patchset: regenerate it with `patchset apply --update-lock` "
    "or `patchset import`, do not edit it"
)

# a lock this patchset cannot read stops every command (apply too): it must go before one is written
REWRITE = "delete it and write it anew with `patchset apply --update-lock` (or `patchset import`)"


def load_lock(path: Path) -> Lock:
    """Read a lock file; a missing file is an empty lock.

    A file that is not UTF-8 text (a binary file), is not TOML, or names a schema version other
    than this patchset's raises ``LedgerError`` naming the file."""
    if not path.exists():
        return Lock()
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LedgerError(
            f"not UTF-8 text ({exc.reason} at byte {exc.start}): a binary or damaged file, not a lock",
            where=Location(path),
            hint=f"restore it from version control, or {REWRITE}",
        ) from None
    data = parse(path, text)
    loc = Locator(text)

    def bad(keypath: tuple[str | int, ...], msg: str, hint: str = REGENERATE) -> LedgerError:
        return LedgerError(msg, where=Location(path, loc.line_of(keypath), ".".join(map(str, keypath))), hint=hint)

    allowed = {"schema", "bodies", "heads", "targets", "scripts"}
    for key in data:
        if key not in allowed:
            raise bad((key,), f"unknown key {key!r} in lock")
    schema = data.get("schema", SCHEMA_VERSION)
    if schema != SCHEMA_VERSION or isinstance(schema, bool):
        raise bad(
            ("schema",),
            f"lock schema version {schema!r} is not supported: this patchset reads schema {SCHEMA_VERSION}",
            f"another version of patchset wrote it (or it was edited): use that version, or {REWRITE}",
        )

    def table(keypath: tuple[str | int, ...], value: object) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise bad(keypath, f"must be a table, not {type(value).__name__} {value!r}"[:200])
        return value

    lock = Lock()
    for pid, digest in table(("bodies",), data.get("bodies", {})).items():
        if not isinstance(digest, str) or not SHA256_RE.match(digest):
            raise bad(("bodies", pid), f"bad sha256 {digest!r} for body {pid!r}")
        lock.bodies[pid] = digest
    for pid, head in table(("heads",), data.get("heads", {})).items():
        if not isinstance(head, str) or not SHA_RE.match(head):
            raise bad(("heads", pid), f"bad commit sha {head!r} for {pid!r}")
        lock.heads[pid] = head
    for pid, digest in table(("scripts",), data.get("scripts", {})).items():  # generated patches' scripts
        if not isinstance(digest, str) or not SHA256_RE.match(digest):
            raise bad(("scripts", pid), f"bad sha256 {digest!r} for the script of {pid!r}")
        lock.scripts[pid] = digest
    for name, tdata in table(("targets",), data.get("targets", {})).items():
        tdata = table(("targets", name), tdata)
        tl = TargetLock(base=str(tdata.get("base", "")))
        for section in ("files", "base_files"):
            for fpath, digest in table(("targets", name, section), tdata.get(section, {})).items():
                keypath = ("targets", name, section, fpath)
                if not isinstance(digest, str) or not SHA256_RE.match(digest):
                    raise bad(keypath, f"bad sha256 {digest!r} for {fpath}")
                where = Location(path, loc.line_of(keypath), f"targets.{name}.{section}")
                try:
                    check_relative(fpath, what=f"{where}: lock key")
                except UnsafePathError as exc:
                    raise UnsafePathError(
                        exc.message,
                        hint="the lock is hostile or damaged: do not use it; regenerate it with "
                        "`patchset apply --update-lock` on a tree you trust",
                    ) from None
                getattr(tl, section)[fpath] = digest
        for key in tdata:
            if key not in ("base", "files", "base_files"):
                raise bad(("targets", name, key), f"unknown key {key!r} in lock target {name!r}")
        lock.targets[name] = tl
    return lock


def render_lock(lock: Lock) -> str:
    """Serialise a lock deterministically (sorted keys) so diffs of the lock are minimal."""
    import tomlkit  # only writers need it; reading uses tomllib

    doc = tomlkit.document()
    doc.add(tomlkit.comment(HEADER))
    doc.add("schema", SCHEMA_VERSION)
    bodies = tomlkit.table()
    for k in sorted(lock.bodies):
        bodies.add(k, lock.bodies[k])
    doc.add("bodies", bodies)
    if lock.heads:
        heads = tomlkit.table()
        for k in sorted(lock.heads):
            heads.add(k, lock.heads[k])
        doc.add("heads", heads)
    if lock.scripts:
        scripts = tomlkit.table()
        for k in sorted(lock.scripts):
            scripts.add(k, lock.scripts[k])
        doc.add("scripts", scripts)
    targets = tomlkit.table(is_super_table=True)
    for name in sorted(lock.targets):
        tl = lock.targets[name]
        t = tomlkit.table()
        if tl.base:
            t.add("base", tl.base)
        for section in ("base_files", "files"):
            mapping = getattr(tl, section)
            if mapping:
                sub = tomlkit.table()
                for f in sorted(mapping):
                    sub.add(f, mapping[f])
                t.add(section, sub)
        targets.add(name, t)
    if lock.targets:
        doc.add("targets", targets)
    return tomlkit.dumps(doc)


def parse_expected(path: Path, text: str | None = None, *, relative: bool = False) -> dict[str, str]:
    """Read an ``EXPECTED.sha256`` file (``<sha256>  <path>`` per line, ``*path`` binary marker ok).

    Every path is checked with ``check_relative`` (naming ``path:line``): ``..``, control
    characters, ``.git`` and patchset's state are refused. ``relative``: the paths become lock
    keys, so an absolute one is refused too; otherwise an absolute path (a list kept in an image,
    ``/usr/lib/.../x.py``) is allowed and only its components are checked.
    """
    if text is None:
        text = _read_utf8(path, "write it with sha256sum (or `patchset export --format expected`)")
    out: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2 or not SHA256_RE.match(parts[0].lower()):
            raise LedgerError(
                f"not a `<sha256>  <path>` line: {line[:80]!r}",
                where=Location(path, lineno),
                hint="each line is 64 hex digits, two spaces, and a path (sha256sum's format)",
            )
        fpath = parts[1].strip().lstrip("*")
        if fpath.startswith("./"):
            fpath = fpath[2:]
        what = f"{Location(path, lineno)}: EXPECTED line"
        if relative or not fpath.startswith("/"):
            check_relative(fpath, what=what)
        else:
            check_relative(fpath.lstrip("/"), what=what, allow_state=True)
        out[fpath] = parts[0].lower()
    return out


def _read_utf8(path: Path, fix: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise LedgerError(
            f"not UTF-8 text (byte {exc.start}): {exc.reason}", where=Location(path), hint=f"the file is damaged: {fix}"
        ) from None


def render_expected(files: dict[str, str]) -> str:
    return "".join(f"{files[p]}  {p}\n" for p in sorted(files))
