"""The on-disk state of a rebase: what lets ``--continue/--skip/--abort`` work and a kill lose nothing.

Layout under the ledger's directory::

    .patchset/rebase/state.json      an interactive rebase stopped at a conflict (session data)
    .patchset/rebase/blobs/<sha256>  file contents the state refers to
    .patchset/rebase/backup/         ledger, lock and bodies as they were when the rebase started
    .patchset/rebase/work/<path>     the conflicted files, written out for a human to edit
    .patchset/rebase/commit.json     journal: the new bytes, present only while they are being written
    .patchset/rebase-backups/<stamp>-<target>/   the previous series of every finished rebase
                                     (previous.tar + manifest.json), the report and the range-diff

The ledger, lock and bodies are written in one ``ledger.edit`` step (itself journaled: a kill while
its files are renamed is rolled forward by the next ledger-lock holder). Before it starts, the old
bytes are saved (a backup: one tar and a manifest) and ``commit.json`` holds the new bytes: after
a SIGKILL, ``--abort`` puts back the old bytes exactly and ``--continue`` finishes writing the new
ones (both again one journaled write).
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import os
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

from patchset import atomic
from patchset.errors import InputError
from patchset.ledger.lock import sha256_bytes
from patchset.ledger.store import write_files

STATE_DIR = ".patchset/rebase"
BACKUPS_DIR = ".patchset/rebase-backups"
PAUSE_ENV = "PATCHSET_REBASE_PAUSE"  # test seam: "<phase>:<marker file>"


def pause_point(phase: str) -> None:
    """Test seam for the kill tests: when ``$PATCHSET_REBASE_PAUSE`` is ``<phase>:<file>``, write the
    file and sleep so a test can SIGKILL the process at exactly this point. Inert otherwise."""
    want = os.environ.get(PAUSE_ENV, "")
    if not want or want.split(":", 1)[0] != phase:
        return
    Path(want.split(":", 1)[1]).write_text(str(os.getpid()))
    time.sleep(120)


class State:
    """The rebase state directory of one ledger."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / STATE_DIR

    # -- what is there -----------------------------------------------------------------------
    @property
    def stopped(self) -> bool:
        return (self.dir / "state.json").is_file()

    @property
    def committing(self) -> bool:
        return (self.dir / "commit.json").is_file()

    def in_progress(self) -> bool:
        """A stopped or interrupted rebase; a leftover directory without either is stale and removed."""
        if self.stopped or self.committing:
            return True
        if self.dir.exists():
            self.clear()
        return False

    def refuse_if_in_progress(self) -> None:
        if self.committing:
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
        path = self.dir / "blobs" / digest
        if not path.exists():
            atomic.write_bytes(path, data)
        return digest

    def get(self, digest: str | None) -> bytes | None:
        if digest is None:
            return None
        path = self.dir / "blobs" / digest
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise InputError(
                f"the rebase state is incomplete: {path} is missing",
                hint="run `patchset rebase --abort` and start again",
            ) from None
        if sha256_bytes(data) != digest:
            raise InputError(
                f"the rebase state is damaged: {path} does not match its name",
                hint="run `patchset rebase --abort` and start again",
            )
        return data

    # -- session -----------------------------------------------------------------------------
    def save(self, data: dict[str, Any]) -> None:
        atomic.write_bytes(self.dir / "state.json", json.dumps(data, indent=1, sort_keys=True).encode())

    def load(self) -> dict[str, Any]:
        try:
            return json.loads((self.dir / "state.json").read_text())
        except (OSError, ValueError) as exc:
            raise InputError(
                f"cannot read the rebase state {self.dir / 'state.json'}: {exc}", hint="run `patchset rebase --abort`"
            ) from None

    def clear(self) -> None:
        """Remove the state directory (renamed away first, so a kill leaves no half-removed state)."""
        if not self.dir.exists():
            return
        trash = self.dir.with_name(f".rebase-trash-{os.getpid()}-{time.time_ns()}")
        os.replace(self.dir, trash)
        shutil.rmtree(trash, ignore_errors=True)

    def write_work(self, rel: str, data: bytes) -> str:
        path = self.dir / "work" / rel
        atomic.write_bytes(path, data)
        return str(path.relative_to(self.root))

    def read_work(self, rel: str) -> bytes:
        path = self.dir / "work" / rel
        if not path.is_file():
            raise InputError(
                f"{path.relative_to(self.root)} is missing",
                hint="write the resolved file there, or `patchset rebase --skip` this patch",
            )
        return path.read_bytes()

    # -- backups and the commit journal ------------------------------------------------------
    def backup(self, dest: Path, rels: list[str], extra: dict[str, bytes] | None = None) -> None:
        """Keep the current bytes of ``rels`` (relative to the ledger dir) in ``dest``: one tar of the
        files plus a manifest of their sha256 (``null``: the file did not exist). ``extra`` files
        (the report, the range-diff) go beside them. One fsync per file written, not per file kept."""
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
        files = {
            dest / "previous.tar": buf.getvalue(),
            dest / "manifest.json": json.dumps(manifest, indent=1, sort_keys=True).encode(),
        }
        files.update({dest / name: data for name, data in (extra or {}).items()})
        atomic.write_many(files)

    def restore(self, src: Path) -> list[str]:
        """Put back every file of a backup byte for byte (files that did not exist are removed)."""
        try:
            manifest = json.loads((src / "manifest.json").read_text())
            with tarfile.open(src / "previous.tar") as tf:
                kept = {m.name: tf.extractfile(m).read() for m in tf if m.isfile()}  # type: ignore[union-attr]
        except (OSError, ValueError, tarfile.TarError) as exc:
            raise InputError(f"cannot read the backup in {src}: {exc}") from None
        writes: dict[Path, bytes | None] = {}
        for rel, digest in manifest.items():
            if digest is None:
                writes[self.root / rel] = None
                continue
            data = kept.get(rel)
            if data is None or sha256_bytes(data) != digest:
                raise InputError(f"backup of {rel} in {src} is damaged (sha256 differs from the manifest)")
            writes[self.root / rel] = data
        write_files(self.root, writes)  # journaled, under the ledger lock
        return sorted(manifest)

    def journal(self, backup: Path, pending: dict[str, bytes | None]) -> None:
        """Record the new bytes about to be written (after the backup is safe), in one file."""
        files = {rel: None if data is None else base64.b64encode(data).decode() for rel, data in pending.items()}
        atomic.write_bytes(
            self.dir / "commit.json",
            json.dumps({"backup": str(backup.relative_to(self.root)), "files": files}, sort_keys=True).encode(),
        )

    def load_journal(self) -> dict[str, Any]:
        try:
            return json.loads((self.dir / "commit.json").read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read the rebase journal {self.dir / 'commit.json'}: {exc}") from None

    def journal_bytes(self) -> dict[str, bytes | None]:
        j = self.load_journal()
        return {rel: None if v is None else base64.b64decode(v) for rel, v in j["files"].items()}

    def finish_journal(self) -> list[str]:
        """Write the journal's new bytes (``--continue`` after a kill while writing)."""
        pending = self.journal_bytes()
        write_files(self.root, {self.root / rel: data for rel, data in pending.items()})  # journaled, locked
        return sorted(pending)


def new_backup_dir(root: Path, target: str) -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    return root / BACKUPS_DIR / f"{stamp}-{target}"
