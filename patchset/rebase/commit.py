"""The end of a rebase: the new series written in one journaled ledger edit, the old one kept.

``commit`` rewrites the ledger (the target's base, dropped and held patches with their reason), the
carried bodies and the lock in one ``ledger.edit`` step. Before it writes, the old bytes go into a
backup with the report and the range-diff, and the new bytes into the state's journal, so a kill
loses nothing: ``finish_interrupted`` (``rebase --continue``) writes the journaled bytes, ``rebase
--abort`` puts the backup back.
"""

from __future__ import annotations

import json

import tomlkit

from patchset.errors import LedgerError
from patchset.ledger import store as ledger_mod
from patchset.ledger.lock import render_lock, sha256_bytes
from patchset.patchfmt.diffs import parse_patch
from patchset.rebase.context import Session
from patchset.rebase.report import ALREADY_UPSTREAM, CARRIED, SKIPPED, SUPERSEDED, RebaseReport, RebaseStatus
from patchset.rebase.state import State, new_backup_dir, pause_point

__all__ = ["commit", "finish_interrupted"]


def _apply_to_doc(s: Session, e: ledger_mod.Edit) -> None:
    label = s.bases.new_label
    tdoc = e.doc["targets"][s.target.name]
    tdoc["base"] = label
    if s.bases.new_version:
        tdoc["base_version"] = s.bases.new_version
    tl = e.lock.target(s.target.name)
    tl.base, tl.base_files, tl.files = label, {}, {}
    for r in s.results:
        patch = next(p for p in s.patches if p.id == r.id)
        table = e.patch_table(r.id)
        if table is None:
            raise LedgerError(f"patch {r.id} vanished from {s.ledger.path} during the rebase")
        if r.verdict in (ALREADY_UPSTREAM, SUPERSEDED):
            e.set_path(table, "state", "dropped")
            e.set_path(table, "reason", r.reason(label))
        elif r.verdict == SKIPPED:
            e.set_path(table, "state", "held")
            e.set_path(table, "reason", r.reason(label))
        elif r.verdict == CARRIED:
            body = s.new_bodies[r.id]
            if body != s.bodies[r.id]:  # an unchanged body is not rewritten
                e.write_file(patch.body_path, body)
            e.lock.bodies[r.id] = sha256_bytes(body)
            moved = {f.path: f.new_path for f in r.files if f.moved_from and f.new_path}
            if moved and "files" in table:
                arr = tomlkit.array()
                for f in table["files"]:
                    arr.append(moved.get(str(f), str(f)))
                table["files"] = arr
            for fp in parse_patch(body, patch.strip_on(s.target), source=patch.body_path):
                for path in fp.paths():
                    key = s.target.lock_key(path)
                    base, final = s.new_base.get(path)[0], s.new.read(path)
                    if base is not None:
                        tl.base_files[key] = sha256_bytes(base)
                    if final is not None:
                        tl.files[key] = sha256_bytes(final)


def commit(s: Session, state: State, report: RebaseReport) -> RebaseReport:
    """Write the run's result (``report``, status done) in one journaled ledger edit."""
    backup = new_backup_dir(s.root, s.target.name)
    with ledger_mod.edit(s.ledger.path) as e:
        _apply_to_doc(s, e)
        text = tomlkit.dumps(e.doc)
        ledger_mod.load_ledger(s.ledger.path, text)  # refuse before anything is written
        pending: dict[str, bytes | None] = {
            s.ledger.path.name: text.encode("utf-8"),
            s.ledger.lock_path.name: render_lock(e.lock).encode("utf-8"),
        }
        for path, data in e.files.items():
            pending[path.relative_to(s.root).as_posix()] = data
        report.written, report.backup = True, str(backup.relative_to(s.root))
        state.backup(backup, sorted(set(pending) | set(s.ledger_files)), _report_files(report))
        state.journal(backup, pending)
        pause_point("journal")
    pause_point("written")
    state.clear()
    return report


def _report_files(report: RebaseReport) -> dict[str, bytes]:
    rd = "".join(p.range_diff for p in report.patches if p.range_diff)
    return {
        "report.json": json.dumps(report.to_json(), indent=1, sort_keys=True).encode(),
        "range-diff.txt": rd.encode("utf-8"),
    }


def finish_interrupted(state: State) -> RebaseReport:
    j = state.load_journal()
    state.finish_journal()
    backup = state.root / j["backup"]
    try:
        report = RebaseReport.from_json(json.loads((backup / "report.json").read_text()))
    except (OSError, ValueError):
        report = RebaseReport(
            target="", onto="", old_base="", old_commit="", new_commit="", new_base="", status=RebaseStatus.DONE
        )
    report.written, report.backup = True, j["backup"]
    state.clear()
    return report
