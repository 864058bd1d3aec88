"""The on-disk state of a rebase: what lets ``--continue/--skip/--abort`` work and a kill lose nothing.

Under the ledger's directory::

    .patchset/rebase/state.json      an interactive rebase stopped at a conflict
    .patchset/rebase/blobs/<sha256>  file contents the state refers to
    .patchset/rebase/backup/         ledger, lock and bodies as they were at the start
    .patchset/rebase/work/<path>     the conflicted files, for a human to edit
    .patchset/rebase/commit.json     journal: the new bytes, while they are being written
    .patchset/rebase-backups/<stamp>-<target>/   the previous series of every finished rebase

The new files are written in one journaled ``ledger.edit``, after the old bytes are backed up and
``commit.json`` holds the new ones: after a SIGKILL ``--abort`` restores the old bytes exactly and
``--continue`` finishes. A clone carries ``.patchset/``, so ``state.json``, ``commit.json`` and
every backup's manifest are sealed (``patchset.sealed``); a foreign one is ``ForeignState`` and
left alone. Even sealed state is checked: real directories, sha256 blob names, every path
confined, a backup's tar read within the archive limits and matched against its manifest.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import io
import os
import re
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

from patchset import atomic
from patchset.confine import check_relative, confine, real_directories
from patchset.errors import ForeignState, InputError, PatchsetError, UnsafePathError
from patchset.ledger.lock import sha256_bytes
from patchset.ledger.store import write_files
from patchset.sealed import read_fd, read_sealed, sealed_json, shown_path, write_sealed

STATE_DIR = ".patchset/rebase"
BACKUPS_DIR = ".patchset/rebase-backups"
PAUSE_ENV = "PATCHSET_REBASE_PAUSE"  # test seam: "<phase>:<marker file>"

# What each sealed file is (sealed in, so one is never taken for another).
KIND_STATE = "rebase session .patchset/rebase/state.json"
KIND_COMMIT = "rebase journal .patchset/rebase/commit.json"
KIND_MANIFEST = "rebase backup manifest.json"
STATE_VERSION = 1
_DIGEST = re.compile(r"[0-9a-f]{64}")
MAX_BLOB = 1 << 30  # bytes: one file of the ledger or of the upstream tree a stopped rebase keeps
# The fields of a stopped session ``_stop`` writes and ``--continue``/``--skip`` read, with their types.
_SESSION: dict[str, type | tuple[type, ...]] = {
    "version": int,
    "ledger": str,
    "target": str,
    "onto": str,
    "old_ref": str,
    "old": str,
    "new": str,
    "new_label": str,
    "new_version": (str, type(None)),
    "location": dict,
    "pr_merges": dict,
    "interactive": bool,
    "index": int,
    "stopped_at": str,
    "results": list,
    "new_bodies": dict,
    "old_tree": dict,
    "new_tree": dict,
    "replay": list,
    "work": list,
    "ledger_sha256": str,
}


def pause_point(phase: str) -> None:
    """Test seam for the kill tests: when ``$PATCHSET_REBASE_PAUSE`` is ``<phase>:<file>``, write the
    file and sleep so a test can SIGKILL the process at exactly this point. Inert otherwise."""
    want = os.environ.get(PAUSE_ENV, "")
    if not want or want.split(":", 1)[0] != phase:
        return
    Path(want.split(":", 1)[1]).write_text(str(os.getpid()))
    time.sleep(120)


def _hint(what: str) -> str:
    return (
        f"it came with the repository (a cloned ledger), from another user, or from an older patchset: check "
        f"what it names, then remove {what} by hand and run the command again (nothing of it is used until then)"
    )


def _damaged(path: Path | str, why: str) -> InputError:
    return InputError(
        f"the rebase state is damaged: {shown_path(path)} {why}",
        hint=f"run `patchset rebase --abort` and start again (or remove {STATE_DIR} by hand)",
    )


def _names(doc: dict[str, Any]) -> list[object]:
    """What a (possibly hostile) rebase file names, for the refusal: files, backup, onto, work files."""
    out: list[object] = []
    files = doc.get("files")
    if isinstance(files, dict):
        out.extend(files)
    for key in ("backup", "onto", "stopped_at"):
        if key in doc:
            out.append(doc[key])
    work = doc.get("work")
    if isinstance(work, list):
        out.extend(work)
    return out or list(doc)


def _read_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path`` (no link), at most ``limit`` of them."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(
            f"the rebase state is incomplete: {shown_path(path)} is missing",
            hint="run `patchset rebase --abort` and start again",
        ) from None
    except OSError as exc:
        raise _damaged(path, f"cannot be read ({exc.strerror}: a link?)") from None
    data = read_fd(fd, limit)
    if data is None:
        raise _damaged(path, f"is not a regular file of at most {limit} bytes ({what})")
    return data


def _ledger_rel(rel: object, where: Path) -> str:
    """A file of the ledger directory named in recorded state: a plain relative path outside
    patchset's state and ``.git`` (``check_relative``), normalised."""
    if not isinstance(rel, str):
        raise _damaged(where, f"names a file as {type(rel).__name__}, not a path")
    try:
        return check_relative(rel, what=f"{shown_path(where)}: ledger file")
    except UnsafePathError as exc:
        raise UnsafePathError(f"{exc.message}; nothing was changed", hint=_hint(STATE_DIR)) from None


class State:
    """The rebase state directory of one ledger."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / STATE_DIR

    # -- where things are ---------------------------------------------------------------------
    def _checked(self) -> Path:
        """The state directory, after checking that it and ``.patchset`` are real directories (or
        missing): state found through a link is someone else's, and clearing it would remove the
        link's target."""
        return real_directories(self.root, STATE_DIR, what="the rebase state directory")

    def _at(self, rel: str, what: str) -> Path:
        """``rel`` (e.g. ``blobs/<sha256>``, ``work/<path>``) inside the state directory, confined."""
        return confine(self._checked(), rel, what=what)

    def _there(self, name: str) -> bool:
        """Anything named ``name`` in the state directory (a link or a directory too: reading it
        then says what it is, rather than the directory being cleared as stale)."""
        return os.path.lexists(self.dir / name)

    # -- what is there -----------------------------------------------------------------------
    @property
    def stopped(self) -> bool:
        return self._there("state.json")

    @property
    def committing(self) -> bool:
        return self._there("commit.json")

    def in_progress(self) -> bool:
        """A stopped or interrupted rebase; a leftover directory without either is stale and removed
        (unless it, or ``.patchset``, is a link: then ``UnsafePathError`` and nothing is removed)."""
        self._checked()
        if self.stopped or self.committing:
            return True
        if os.path.lexists(self.dir):
            self.clear()
        return False

    def foreign(self) -> PatchsetError | None:
        """The refusal the state here would get (not this installation's, or unusable), or None
        (nothing here, or ours). Reads only."""
        try:
            self._checked()
            if self.committing:
                self.load_journal()
            elif self.stopped:
                self.load()
        except (ForeignState, UnsafePathError) as exc:
            return exc
        except InputError:
            return None  # ours, but damaged: --abort says so
        return None

    def refuse_if_in_progress(self) -> None:
        if self.committing:
            self.load_journal()  # a foreign journal is refused as such
            raise InputError(
                "a rebase was interrupted while writing the new series",
                hint="run `patchset rebase --continue` to finish writing it, or `--abort` to put "
                "the previous ledger, lock and bodies back byte for byte",
            )
        if self.stopped:
            data = self.load()
            raise InputError(
                f"a rebase onto {data.get('onto')} is in progress (stopped at {data.get('stopped_at')})",
                hint="edit the files under .patchset/rebase/work/, then `patchset rebase --continue`; "
                "or `--skip` this patch, or `--abort`",
            )

    # -- blobs -------------------------------------------------------------------------------
    def put(self, data: bytes | None) -> str | None:
        if data is None:
            return None
        digest = sha256_bytes(data)
        path = self._at(f"blobs/{digest}", "rebase blob")
        if not path.exists():
            atomic.write_bytes(path, data)
        return digest

    def get(self, digest: str | None) -> bytes | None:
        if digest is None:
            return None
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise _damaged(self.dir / "state.json", f"names a blob as {digest!r}, not a sha256")
        path = self._at(f"blobs/{digest}", "rebase blob")
        data = _read_file(path, MAX_BLOB, "a kept file")
        if sha256_bytes(data) != digest:
            raise _damaged(path, "does not match its name")
        return data

    # -- session -----------------------------------------------------------------------------
    def save(self, data: dict[str, Any]) -> None:
        write_sealed(self._at("state.json", "rebase state"), KIND_STATE, data)

    def load(self) -> dict[str, Any]:
        """The stopped session, if this installation sealed it (``ForeignState`` otherwise), its
        fields checked for type (``InputError`` naming the first that is not what ``_stop`` writes)."""
        path = self._at("state.json", "rebase state")
        data = read_sealed(path, KIND_STATE, what="a stopped rebase", hint=_hint(STATE_DIR), names=_names)
        if data is None:
            raise InputError(
                "no rebase is stopped here", hint="start one with `patchset rebase --onto REF --interactive`"
            )
        if data.get("version") != STATE_VERSION:
            raise _damaged(path, f"has version {data.get('version')!r}, not {STATE_VERSION}")
        for key, kind in _SESSION.items():
            if not isinstance(data.get(key), kind) or (kind is int and isinstance(data.get(key), bool)):
                raise _damaged(path, f"has no {key} of the right type")
        why = _session_problem(data)
        if why:
            raise _damaged(path, why)
        return data

    def clear(self) -> None:
        """Remove the state directory (renamed away first, so a kill leaves no half-removed state).
        Never through a link: ``UnsafePathError`` when it or ``.patchset`` is one."""
        if not os.path.lexists(self._checked()):
            return
        trash = self.dir.with_name(f".rebase-trash-{os.getpid()}-{time.time_ns()}")
        os.replace(self.dir, trash)
        shutil.rmtree(trash, ignore_errors=True)

    def write_work(self, rel: str, data: bytes) -> str:
        path = self._at(f"work/{rel}", "rebase work file")
        atomic.write_bytes(path, data)
        return str(path.relative_to(os.path.realpath(self.root)))

    def read_work(self, rel: str) -> bytes:
        path = self._at(f"work/{rel}", "rebase work file")
        shown = f"{STATE_DIR}/work/{rel}"
        if not path.is_file():
            raise InputError(
                f"{shown} is missing",
                hint="write the resolved file there, or `patchset rebase --skip` this patch",
            )
        return _read_file(path, MAX_BLOB, "a resolved file")

    # -- backups and the commit journal ------------------------------------------------------
    def backup(self, dest: Path, rels: list[str], extra: dict[str, bytes] | None = None) -> None:
        """Keep the current bytes of ``rels`` (relative to the ledger dir) in ``dest``: one tar of the
        files plus a sealed manifest of their sha256 (``null``: the file did not exist). ``extra``
        files (the report, the range-diff) go beside them. One fsync per file written, not per file kept."""
        manifest: dict[str, str | None] = {}
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for rel in sorted(set(rels)):
                src = self.root / rel
                if not src.is_file():
                    manifest[rel] = None
                    continue
                data = src.read_bytes()
                manifest[rel] = sha256_bytes(data)
                info = tarfile.TarInfo(rel)
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tf.addfile(info, io.BytesIO(data))
        real_directories(self.root, _under_root(self.root, dest), what="the rebase backup directory")
        files = {
            dest / "previous.tar": buf.getvalue(),
            dest / "manifest.json": sealed_json(KIND_MANIFEST, {"version": STATE_VERSION, "files": manifest}),
        }
        files.update({dest / name: data for name, data in (extra or {}).items()})
        atomic.write_many(files)

    def restore(self, src: Path) -> list[str]:
        """Put back every file of a backup byte for byte (files that did not exist are removed).
        Only a backup whose manifest this installation sealed; every file checked against it."""
        where = real_directories(self.root, _under_root(self.root, src), what="the rebase backup directory")
        if os.path.abspath(where) == os.path.abspath(self.dir / "backup"):
            # a stopped session's own backup: only when the session is this installation's too
            # (checked for its seal alone: ``--abort`` is also the way out of a damaged one)
            read_sealed(
                self._at("state.json", "rebase state"),
                KIND_STATE,
                what="a stopped rebase",
                hint=_hint(STATE_DIR),
                names=_names,
            )
        body = read_sealed(
            where / "manifest.json",
            KIND_MANIFEST,
            what="a rebase backup",
            hint=_hint(shown_path(where)),
            names=lambda d: list(d.get("files") or d),
        )
        if body is None:
            raise InputError(
                f"cannot read the backup in {shown_path(where)}: manifest.json is missing",
                hint=f"the backup is incomplete; check {shown_path(where)} by hand",
            )
        manifest = body.get("files")
        if body.get("version") != STATE_VERSION or not isinstance(manifest, dict):
            raise _damaged(where / "manifest.json", "is not a backup manifest")
        wanted: dict[str, str | None] = {}
        for rel, digest in manifest.items():
            if digest is not None and not (isinstance(digest, str) and _DIGEST.fullmatch(digest)):
                raise _damaged(where / "manifest.json", f"gives {rel!r} the digest {digest!r}")
            wanted[_ledger_rel(rel, where / "manifest.json")] = digest
        kept = _read_backup(where / "previous.tar", {r for r, d in wanted.items() if d is not None})
        writes: dict[Path, bytes | None] = {}
        for rel, digest in wanted.items():
            if digest is None:
                writes[self.root / rel] = None
                continue
            data = kept.get(rel)
            if data is None or sha256_bytes(data) != digest:
                raise InputError(
                    f"backup of {rel!r} in {shown_path(where)} is damaged (sha256 differs from the manifest)",
                    hint="nothing was restored; check the backup by hand",
                )
            writes[self.root / rel] = data
        write_files(self.root, writes)  # journaled, under the ledger lock, every path confined again
        return sorted(wanted)

    def journal(self, backup: Path, pending: dict[str, bytes | None]) -> None:
        """Record the new bytes about to be written (after the backup is safe), in one sealed file."""
        files = {rel: None if data is None else base64.b64encode(data).decode() for rel, data in pending.items()}
        body = {"version": STATE_VERSION, "backup": backup.relative_to(self.root).as_posix(), "files": files}
        write_sealed(self._at("commit.json", "rebase journal"), KIND_COMMIT, body)

    def load_journal(self) -> dict[str, Any]:
        """The commit journal, if this installation sealed it (``ForeignState`` otherwise), checked:
        ``backup`` is one directory under ``.patchset/rebase-backups/`` (normalised in the result),
        ``files`` maps confined ledger paths to base64 or null."""
        path = self._at("commit.json", "rebase journal")
        j = read_sealed(path, KIND_COMMIT, what="a rebase journal", hint=_hint(STATE_DIR), names=_names)
        if j is None:
            raise InputError("no rebase is being written here", hint="nothing to finish")
        backup, files = j.get("backup"), j.get("files")
        if j.get("version") != STATE_VERSION or not isinstance(backup, str) or not isinstance(files, dict):
            raise _damaged(path, "is not a rebase journal")
        try:
            rel = check_relative(backup, what=f"{shown_path(path)}: backup", allow_state=True)
        except UnsafePathError as exc:
            raise UnsafePathError(f"{exc.message}; nothing was changed", hint=_hint(STATE_DIR)) from None
        head, _, name = rel.rpartition("/")
        if head != BACKUPS_DIR or not name:
            raise UnsafePathError(
                f"{shown_path(path)}: backup {backup!r} is not a directory under {BACKUPS_DIR}/; nothing was changed",
                hint=_hint(STATE_DIR),
            )
        real_directories(self.root, rel, what="the rebase backup directory")
        checked: dict[str, str | None] = {}
        for name_, data in files.items():
            if data is not None and not isinstance(data, str):
                raise _damaged(path, f"gives {name_!r} content of type {type(data).__name__}")
            checked[_ledger_rel(name_, path)] = data
        return {**j, "backup": rel, "files": checked}

    def journal_bytes(self) -> dict[str, bytes | None]:
        j = self.load_journal()
        out: dict[str, bytes | None] = {}
        for rel, v in j["files"].items():
            try:
                out[rel] = None if v is None else base64.b64decode(v, validate=True)
            except (binascii.Error, ValueError):
                raise _damaged(self.dir / "commit.json", f"holds content for {rel!r} that is not base64") from None
        return out

    def finish_journal(self) -> list[str]:
        """Write the journal's new bytes (``--continue`` after a kill while writing)."""
        pending = self.journal_bytes()
        write_files(self.root, {self.root / rel: data for rel, data in pending.items()})  # journaled, locked
        return sorted(pending)


_LOCATIONS = {"repo": ("path",), "releases": ("project", "old", "new"), "dirs": ("old", "new", "old_ref")}
_REPLAY_TEXT = ("path", "how", "message")  # str
_REPLAY_NAMES = ("new_path", "moved_from", "delete_path")  # str or null
_REPLAY_BLOBS = ("result", "ours")  # a blob digest or null


def _digest_or_none(v: object) -> bool:
    return v is None or (isinstance(v, str) and bool(_DIGEST.fullmatch(v)))


def _session_problem(d: dict[str, Any]) -> str:
    """What is wrong inside a stopped session whose top-level fields have the right types ("" when
    nothing): the shapes ``--continue``/``--skip`` take apart, checked before any is used."""
    from patchset.rebase.report import PatchResult

    results, index = d["results"], d["index"]
    if index < 0 or len(results) != index + 1:
        return f"stops at patch {index} of {len(results)} results"
    for r in results:
        try:
            PatchResult.from_json(r)
        except (TypeError, KeyError, ValueError, AttributeError):
            return "has a patch result of the wrong shape"
    loc = d["location"]
    need = _LOCATIONS.get(loc.get("kind"))
    if need is None or not all(isinstance(loc.get(k), str) for k in need):
        return "names bases of an unknown kind"
    for name in ("old_tree", "new_tree"):
        for rel, v in d[name].items():
            ok = isinstance(v, list) and len(v) == 2 and _digest_or_none(v[0])
            if not ok or not isinstance(v[1], (str, int, type(None))) or isinstance(v[1], bool):
                return f"has a {name} entry of the wrong shape ({rel!r})"
    if not all(isinstance(k, str) and _digest_or_none(v) for k, v in d["new_bodies"].items()):
        return "has a new body of the wrong shape"
    for x in d["replay"]:
        ok = isinstance(x, dict) and all(isinstance(x.get(k), str) for k in _REPLAY_TEXT)
        ok = ok and all(isinstance(x.get(k), (str, type(None))) for k in _REPLAY_NAMES)
        ok = ok and all(_digest_or_none(x.get(k)) for k in _REPLAY_BLOBS) and "mode" in x
        if not ok:
            return "has a replayed file of the wrong shape"
    if len(d["replay"]) != len(results[index].get("files") or []):
        return "replays another number of files than its result names"
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in d["pr_merges"].items()):
        return "has a PR merge of the wrong shape"
    if not all(isinstance(w, str) for w in d["work"]):
        return "names a work file of the wrong shape"
    return ""


def _under_root(root: Path, path: Path) -> str:
    """``path`` as a name relative to the ledger directory ``root`` (backups live under it)."""
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).as_posix()
    except ValueError:
        raise UnsafePathError(f"the rebase backup {shown_path(path)} is outside the ledger directory {root}") from None


def _read_backup(tar: Path, wanted: set[str]) -> dict[str, bytes]:
    """The files ``wanted`` from a backup's tar, read with the archive limits (a hostile tar is an
    InputError, never a loop or a memory blow-up); other members are skipped."""
    from patchset.upstream.archives import FILE, ArchiveReader  # the archive reader loads only for --abort

    if not wanted:
        return {}
    kept: dict[str, bytes] = {}
    try:
        for member in ArchiveReader(tar, strip_top=False):
            if member.kind == FILE and member.path in wanted:
                kept[member.path] = member.data
    except PatchsetError as exc:
        raise InputError(f"cannot read the backup {shown_path(tar)}: {exc.message}", hint=exc.hint) from None
    return kept


def new_backup_dir(root: Path, target: str) -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    return root / BACKUPS_DIR / f"{stamp}-{target}"
