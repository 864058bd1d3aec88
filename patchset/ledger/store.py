"""Reading and writing ``patches.toml``.

Reading validates against ``schema`` and builds the ``model`` classes. Writing goes through
tomlkit, so a human's comments and ordering survive; every write is re-validated before it
touches disk and lands atomically together with the lock and any body files (``atomic.write_many``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import AoT, Table

from patchset import atomic
from patchset.errors import InputError
from patchset.ledger.lock import load_lock, render_lock
from patchset.ledger.model import (
    SCHEMA_VERSION,
    Ledger,
    Lock,
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
from patchset.ledger.tomlio import parse

DEFAULT_NAME = "patches.toml"


def find_ledger(directory: Path | None = None, ledger: Path | None = None) -> Path:
    """The ledger path from ``--ledger`` or ``-C``; ``patches.toml`` in the current directory by default."""
    if ledger is not None:
        return ledger if ledger.is_absolute() else (directory or Path.cwd()) / ledger
    return (directory or Path.cwd()) / DEFAULT_NAME


def _target(name: str, d: dict[str, Any]) -> Target:
    pm = PathMap([(k, v) for k, v in d.get("path_map", {}).items()])
    return Target(
        name=name,
        upstream=d["upstream"],
        github=d["github"],
        branch=d.get("branch", "main"),
        base=d.get("base", ""),
        base_version=d.get("base_version", ""),
        strip=d.get("strip", 1),
        layout=d.get("layout", "source"),
        package=d.get("package", ""),
        installed_root=d.get("installed_root", ""),
        path_map=pm,
        notes=d.get("notes", ""),
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
        switches=Switches(env=dict(sw.get("env", {})), flags=list(sw.get("flags", []))),
        tests=[TestSpec(**t) for t in d.get("tests", [])],
        status=RecordedStatus(**st),
        dep3=dict(d.get("dep3", {})),
        line=line,
    )


def load_ledger(path: Path, text: str | None = None) -> Ledger:
    """Load and validate a ledger and its lock. Raises LedgerError naming file, line and key."""
    if text is None:
        data = parse(path)
        text = path.read_text(encoding="utf-8")
    else:
        data = parse(path, text)
    v = Validator(path, text)
    v.check_document(data)
    targets = {name: _target(name, t) for name, t in data.get("targets", {}).items()}
    patches = [_patch(p, v.locator.line_of(("patch", i)) or 0) for i, p in enumerate(data.get("patch", []))]
    lock = load_lock(path.with_suffix(".lock"))
    extra = {k: data[k] for k in ("title", "description") if k in data}
    return Ledger(path=path, targets=targets, patches=patches, lock=lock, schema=data["schema"], extra=extra)


@dataclass
class Edit:
    """A pending change to the ledger, the lock and body files, written all at once by ``commit``."""

    path: Path
    doc: tomlkit.TOMLDocument
    lock: Lock
    files: dict[Path, bytes | None] = field(default_factory=dict)

    def patch_tables(self) -> AoT | list[Table]:
        if "patch" not in self.doc:
            self.doc.append("patch", tomlkit.aot())
        return self.doc["patch"]

    def patch_table(self, patch_id: str) -> Table | None:
        for t in self.patch_tables():
            if t.get("id") == patch_id:
                return t
        return None

    def add_patch(self, values: dict[str, Any]) -> Table:
        table = tomlkit.table()
        for k, v in values.items():
            if v in (None, "", [], {}):
                continue
            table.add(k, v)
        self.patch_tables().append(table)
        return table

    def set_path(self, table: Table, dotted: str, value: Any) -> None:
        """Set ``a.b.c`` inside a patch table, creating sub-tables as needed."""
        *parents, last = dotted.split(".")
        cur: Any = table
        for name in parents:
            if name not in cur:
                cur.add(name, tomlkit.table())
            cur = cur[name]
        cur[last] = value

    def write_file(self, rel: str, data: bytes | None) -> None:
        self.files[self.path.parent / rel] = data

    def commit(self) -> Ledger:
        text = tomlkit.dumps(self.doc)
        ledger = load_ledger(self.path, text)  # never write a ledger we could not read back
        ledger.lock = self.lock
        writes: dict[Path, bytes | None] = dict(self.files)
        writes[self.path] = text.encode("utf-8")
        writes[self.path.with_suffix(".lock")] = render_lock(self.lock).encode("utf-8")
        atomic.write_many(writes)
        return ledger


@contextmanager
def edit(path: Path) -> Iterator[Edit]:
    """Open the ledger for a change; nothing is written unless the block finishes without error."""
    load_ledger(path)  # refuse to edit a ledger that is already broken: the error names the line
    text = path.read_text(encoding="utf-8")
    e = Edit(path=path, doc=tomlkit.parse(text), lock=load_lock(path.with_suffix(".lock")))
    yield e
    e.commit()


def new_ledger_text(title: str = "") -> str:
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
    (path.parent / "patchset" / "series").mkdir(parents=True, exist_ok=True)
    atomic.write_many({path: new_ledger_text(title).encode(), path.with_suffix(".lock"): render_lock(Lock()).encode()})
