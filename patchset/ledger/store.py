"""Reading and writing ``patches.toml``.

Reading validates against ``schema`` and builds the ``model`` classes. Writing goes through
tomlkit, so a human's comments and ordering survive; every write is re-validated before it
touches disk and lands together with the lock and any body files, all or nothing even across a
kill -9: the files are staged and journaled (``patchset.journal``, in ``.patchset/ledger-txn``
beside the ledger) before the first rename, and the next process to take the ledger lock (any
edit, ``patchset recover``) rolls an interrupted edit forward. ``validate``/``status`` report one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchset.errors import EnvironmentFailure, InputError
from patchset.ledger.lock import load_lock, render_lock, sha256_bytes
from patchset.ledger.model import (
    SCHEMA_VERSION,
    Generate,
    Ledger,
    Lock,
    OverlayOrigin,
    Patch,
    PathMap,
    RecordedStatus,
    Source,
    Switches,
    Target,
    TestSpec,
    Upstream,
)
from patchset.ledger.schema import Validator
from patchset.ledger.tomlio import array_lines, parse

if TYPE_CHECKING:  # tomlkit and the journal are imported by the writers only: reading a ledger stays fast
    import tomlkit
    from tomlkit.items import AoT, Table

    from patchset.journal.commit import Journal
    from patchset.journal.recovery import Direction

DEFAULT_NAME = "patches.toml"
EDIT_TXN = ".patchset/ledger-txn"  # the journal of a ledger edit being written (patchset.journal)


# --------------------------------------------------------------------------- journaled writes


def edit_journal(root: Path) -> Journal:
    """The transaction directory of ledger edits in the ledger directory ``root``."""
    from patchset.journal.commit import Journal

    return Journal(root, root / EDIT_TXN, busy="another patchset process is writing this ledger")


def pending_edit(root: Path) -> bool:
    """Was a ledger edit in ``root`` interrupted (kill -9, power loss)? Reads only. (A cloned
    ledger may carry a ``.patchset/ledger-txn`` of its own: recovery refuses what this
    installation did not write, ``ForeignJournal``.)"""
    return os.path.lexists(root / EDIT_TXN)


def _tidy(root: Path) -> None:
    """Leave no empty ``.patchset`` directory behind a journal."""
    try:
        (root / EDIT_TXN).parent.rmdir()
    except OSError:
        pass


def _lock_root(root: Path) -> Any:
    from patchset import locking  # writers only: reading a ledger takes no lock

    return locking.hold(root, f"the ledger in {root}")


def recover_edit(root: Path, direction: Direction = "auto") -> str | None:
    """Finish (``auto``) or undo (``back``) an interrupted ledger edit in ``root``, under the ledger
    lock. ``None``: nothing to do; else ``discarded`` / ``rolled forward`` / ``rolled back``."""
    if not pending_edit(root):
        return None
    with _lock_root(root):
        done = edit_journal(root).recover(direction)
        _tidy(root)
    return done


@dataclass
class StagedFiles:
    """A ledger edit's files written to the journal's staging area (the lock of its transaction
    directory held), not yet in place: ``commit`` renames them all, ``discard`` drops them."""

    journal: Journal
    prepared: dict[str, Any]

    def commit(self) -> None:
        try:
            self.journal.commit_prepared(self.prepared)
        finally:
            self.journal.unlock()
            _tidy(self.journal.root)

    def discard(self) -> None:
        try:
            self.journal.recover_locked("auto")
            self.journal.finish()
        finally:
            self.journal.unlock()
            _tidy(self.journal.root)


def stage_files(root: Path, files: Mapping[Path, bytes | None]) -> StagedFiles:
    """Stage ``files`` (paths inside the ledger directory ``root``; ``None`` deletes) for one
    journaled commit. The caller holds the ledger lock. An interrupted earlier edit is rolled
    forward first. A full or read-only disk fails here, before anything is changed."""
    from patchset.confine import check_relative
    from patchset.journal.commit import Change

    j = edit_journal(root)
    changes = []
    for path, data in files.items():
        rel = Path(
            check_relative(os.path.relpath(os.path.abspath(path), os.path.abspath(root)), what=f"{root}: a file")
        )
        mode = None
        if data is not None:
            try:
                mode = path.stat().st_mode & 0o7777
            except OSError:
                mode = None
        changes.append(Change(rel.as_posix(), data, mode))
    try:
        j.lock()
    except BaseException:
        _tidy(root)
        raise
    try:
        j.recover_locked("auto")
        prepared = j.prepare(changes)
    except BaseException as exc:
        j.unlock()
        _tidy(root)
        if isinstance(exc, OSError):
            raise EnvironmentFailure(
                f"{root}: cannot write the ledger's new files: {exc.strerror or exc}",
                hint="free space or fix permissions and run the command again; nothing was changed",
            ) from None
        raise
    return StagedFiles(j, prepared)


def write_files(root: Path, files: Mapping[Path, bytes | None]) -> None:
    """Write several files of the ledger directory ``root`` all-or-nothing (journaled), under the
    ledger lock."""
    with _lock_root(root):
        stage_files(root, files).commit()


def find_ledger(directory: Path | None = None, ledger: Path | None = None) -> Path:
    """The ledger path from ``--ledger`` or ``-C``; ``patches.toml`` in the current directory by default."""
    if ledger is not None:
        return ledger if ledger.is_absolute() else (directory or Path.cwd()) / ledger
    return (directory or Path.cwd()) / DEFAULT_NAME


def target_from(name: str, d: dict[str, Any]) -> Target:
    return Target(
        name=name,
        upstream=d.get("upstream", ""),
        github=d.get("github", ""),
        branch=d.get("branch", "main"),
        base=d.get("base", ""),
        base_version=d.get("base_version", ""),
        strip=d.get("strip", 1),
        layout=d.get("layout", "source"),
        package=d.get("package", ""),
        installed_root=d.get("installed_root", ""),
        base_image=d.get("base_image", ""),
        path_map=PathMap(list(d.get("path_map", {}).items())),
        notes=d.get("notes", ""),
        watch=d.get("watch", "names"),
    )


def _patch(d: dict[str, Any], line: int) -> Patch:
    up = d.get("upstream", {})
    src = d.get("source", {})
    sw = d.get("switches", {})
    st = d.get("status", {})
    return Patch(
        id=d["id"],
        target=d["target"],
        title=d["title"],
        origin=d["origin"],
        body=d.get("body", ""),
        description=d.get("description", ""),
        files=list(d.get("files", [])),
        authors=list(d.get("authors", [])),
        porter=d.get("porter", ""),
        state=d.get("state", "active"),
        reason=d.get("reason", ""),
        optional=d.get("optional", False),
        notes=d.get("notes", ""),
        upstream=Upstream(**{k: list(v) for k, v in up.items()}),
        source=Source(**src),
        switches=Switches(
            env=dict(sw.get("env", {})), flags=list(sw.get("flags", [])), independent=bool(sw.get("independent"))
        ),
        tests=[TestSpec(**t) for t in d.get("tests", [])],
        status=RecordedStatus(**{**st, "followups": list(st.get("followups", []))}),
        dep3=dict(d.get("dep3", {})),
        line=line,
        **_onboarding_fields(d),
    )


def _onboarding_fields(d: dict[str, Any]) -> dict[str, Any]:
    """``tags``, ``[patch.generate]`` and ``[patch.overlay]`` (issue #25)."""
    gen = d.get("generate")
    ov = d.get("overlay")
    return {
        "tags": list(d.get("tags", [])),
        "generate": Generate(
            command=list(gen["command"]),
            script=gen.get("script", ""),
            bind=gen.get("bind", ""),
            timeout=gen.get("timeout", 300),
        )
        if gen is not None
        else None,
        "overlay": OverlayOrigin(files=list(ov.get("files", [])), manifest=ov.get("manifest", ""))
        if ov is not None
        else None,
    }


def _engine_lines(text: str, names: list[str]) -> dict[str, int]:
    """The line of each ``[engines.NAME]`` header (0 when written inline)."""
    if not names:
        return {}
    from patchset.ledger.tomlio import Locator

    loc = Locator(text)
    return {n: loc.line_of(("engines", n)) or 0 for n in names}


def load_ledger(path: Path, text: str | None = None) -> Ledger:
    """Load and validate a ledger and its lock. Raises LedgerError naming file, line and key."""
    if text is None:
        data = parse(path)
        text = path.read_text(encoding="utf-8")
    else:
        data = parse(path, text)
    Validator(path, text).check_document(data)
    targets = {name: target_from(name, t) for name, t in data.get("targets", {}).items()}
    lines = array_lines(text, "patch")
    patches = [_patch(p, lines[i] if i < len(lines) else 0) for i, p in enumerate(data.get("patch", []))]
    lock = load_lock(path.with_suffix(".lock"))
    extra: dict[str, Any] = {k: data[k] for k in ("title", "description") if k in data}
    raw_engines = data.get("engines", {})
    lines_of = _engine_lines(text, list(raw_engines))
    engines = {name: {**e, "line": lines_of.get(name, 0)} for name, e in raw_engines.items()}
    return Ledger(
        path=path,
        targets=targets,
        patches=patches,
        lock=lock,
        schema=data["schema"],
        extra=extra,
        engines=engines,
    )


@dataclass
class Edit:
    """A pending change to the ledger, the lock and body files, written all at once by ``commit``."""

    path: Path
    doc: tomlkit.TOMLDocument
    lock: Lock
    files: dict[Path, bytes | None] = field(default_factory=dict)
    staged: StagedFiles | None = None
    cancelled: bool = False  # set by the caller: leave the block without writing anything
    recovered: str | None = None  # an interrupted earlier edit found on opening (what was done to it)

    def patch_tables(self) -> AoT | list[Table]:
        import tomlkit

        if "patch" not in self.doc:
            self.doc.append("patch", tomlkit.aot())
        tables: AoT | list[Table] = self.doc["patch"]
        return tables

    def patch_table(self, patch_id: str) -> Table | None:
        return next((t for t in self.patch_tables() if t.get("id") == patch_id), None)

    def patch_of_kind(self, patch_id: str, table: str, target: str, kind: str, hint: str) -> Table | None:
        """The entry ``patch_id`` when it is a ``kind`` patch (one with a ``[patch.<table>]``:
        ``overlay``, ``generate``) of ``target``; None when there is none; InputError when the id
        is another patch's."""
        existing = self.patch_table(patch_id)
        if existing is not None and (table not in existing or existing.get("target") != target):
            raise InputError(
                f"patch {patch_id!r} exists and is not {kind} of target {target!r}; nothing was imported", hint=hint
            )
        return existing

    def same_body(self, patch_id: str, rel: str, body: bytes) -> bool:
        """Whether patch ``patch_id``'s stored body (``rel``, to the ledger's directory) is ``body``
        and the lock says so too: a re-import that changes nothing."""
        old = self.path.parent / rel
        return old.is_file() and old.read_bytes() == body and self.lock.bodies.get(patch_id) == sha256_bytes(body)

    def add_patch(self, values: dict[str, Any]) -> Table:
        import tomlkit

        table = tomlkit.table()
        for k, v in values.items():
            if v not in (None, "", [], {}):
                table.add(k, v)
        self.patch_tables().append(table)
        return table

    def add_target(self, name: str, values: dict[str, Any]) -> None:
        """A new ``[targets.<name>]`` table (tomlkit quotes names such as ``python3.11``), placed
        before the first ``[[patch]]`` so the ledger keeps reading top-down."""
        import tomlkit

        if "targets" in self.doc and name in self.doc["targets"]:
            raise InputError(f"target {name!r} already exists in {self.path.name}", hint="edit it there")
        patches = self.doc.pop("patch") if "patch" in self.doc else None
        if "targets" not in self.doc:
            self.doc.add("targets", tomlkit.table(is_super_table=True))
        table = tomlkit.table()
        for k, v in values.items():  # a dict (path_map) becomes a sub-table
            table.add(k, v)
        self.doc["targets"][name] = table
        if patches is not None:
            self.doc.add(tomlkit.nl())
            self.doc.append("patch", patches)

    def set_path(self, table: Table, dotted: str, value: Any) -> None:
        """Set ``a.b.c`` inside a patch table, creating sub-tables as needed."""
        import tomlkit

        *parents, last = dotted.split(".")
        cur: Any = table
        for name in parents:
            if name not in cur:
                cur.add(name, tomlkit.table())
            cur = cur[name]
        cur[last] = value

    def write_file(self, rel: str, data: bytes | None) -> None:
        """Queue a body file (``rel`` to the ledger's directory); never through a symbolic link."""
        root = self.path.parent
        at = root
        for part in Path(rel).parts:
            at = at / part
            if at.is_symlink():
                raise InputError(
                    f"{at} is a symbolic link: patchset writes bodies only to real files and directories inside {root}",
                    hint="replace the link with a real directory (or file) and run the command again",
                )
        self.files[root / rel] = data

    def stage(self) -> None:
        """Write every file of the edit to a temporary name now (a full or read-only disk fails
        here, before the caller changes anything else); ``commit`` then only renames."""
        if self.staged is not None:
            return
        import tomlkit

        text = tomlkit.dumps(self.doc)
        load_ledger(self.path, text)  # never write a ledger we could not read back
        writes: dict[Path, bytes | None] = dict(self.files)
        writes[self.path] = text.encode("utf-8")
        writes[self.path.with_suffix(".lock")] = render_lock(self.lock).encode("utf-8")
        self.staged = stage_files(self.path.parent, writes)

    def discard(self) -> None:
        """Drop staged files (the edit is abandoned)."""
        if self.staged is not None:
            self.staged.discard()
            self.staged = None

    def commit(self) -> Ledger:
        """Every file of the edit in place, all or nothing (journaled; Ctrl-C is held meanwhile)."""
        self.stage()
        staged, self.staged = self.staged, None
        assert staged is not None
        staged.commit()
        return load_ledger(self.path)


@contextmanager
def edit(path: Path) -> Iterator[Edit]:
    """Open the ledger for a change; nothing is written unless the block finishes without error.

    The ledger lock (``patchset.locking``) is held from the read to the write, so two processes
    editing one ledger (two imports, an import and a fetch) serialise instead of losing an edit.
    An edit interrupted earlier (kill -9 while its files were renamed) is finished first.
    """
    import tomlkit

    from patchset import locking

    with locking.ledger_lock(path):
        recovered = recover_edit(path.parent)
        load_ledger(path)  # refuse to edit a ledger that is already broken: the error names the line
        text = path.read_text(encoding="utf-8")
        e = Edit(path=path, doc=tomlkit.parse(text), lock=load_lock(path.with_suffix(".lock")), recovered=recovered)
        try:
            yield e
        except BaseException:
            e.discard()
            raise
        if e.cancelled:
            e.discard()
        else:
            e.commit()


def new_ledger_text(title: str = "") -> str:
    import tomlkit

    doc = tomlkit.document()
    doc.add(tomlkit.comment("patchset ledger: one [targets.<name>] per upstream, one [[patch]] per patch, in order."))
    doc.add(tomlkit.comment("Schema: see docs/ledger.md. The tool writes hashes to patches.lock, never here."))
    doc.add("schema", SCHEMA_VERSION)
    if title:
        doc.add("title", title)
    doc.add(tomlkit.nl())
    doc.add("targets", tomlkit.table(is_super_table=True))
    return tomlkit.dumps(doc)


def init_ledger(path: Path, title: str = "") -> None:
    if path.exists():
        raise InputError(f"{path} already exists", hint="use it as it is, or pass --ledger for another file")
    from patchset import atomic

    (path.parent / "patchset" / "series").mkdir(parents=True, exist_ok=True)
    atomic.write_many({path: new_ledger_text(title).encode(), path.with_suffix(".lock"): render_lock(Lock()).encode()})
