"""An interactive rebase stopped at a conflict: the session saved to disk, and taken back.

``stop`` writes the conflicted files out for a human to edit (``.patchset/rebase/work/``) and saves
what the run holds in memory — the results so far, the new bodies, the changed files of both trees
and the stopped patch's replay — in the rebase state (``state``), file contents as blobs.
``resume`` rebuilds the session from it for ``--continue`` and ``--skip``, refusing when the
ledger or its series changed meanwhile.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from patchset.errors import InputError
from patchset.ledger import store as ledger_mod
from patchset.ledger.lock import sha256_bytes
from patchset.rebase.context import Session, load_series, open_session
from patchset.rebase.replay import BROKEN, BlobStore, FileReplay, PatchReplay, Tree
from patchset.rebase.replay import CONFLICT as F_CONFLICT
from patchset.rebase.report import PatchResult, RebaseReport
from patchset.rebase.state import State
from patchset.upstream.bases import reopen

__all__ = ["replay_from", "resume", "stop"]


def _tree_json(state: State, t: Tree) -> dict[str, list]:
    return {p: [state.put(data), mode] for p, (data, mode) in sorted(t.changes.items())}


def _tree_from(state: State, store: BlobStore, d: dict[str, list]) -> Tree:
    return Tree(store, {p: (state.get(v[0]), v[1]) for p, v in d.items()})


def _replay_json(state: State, rep: PatchReplay) -> list[dict]:
    return [
        {
            "path": f.path,
            "new_path": f.new_path,
            "how": f.how,
            "result": state.put(f.result),
            "mode": f.mode,
            "ours": state.put(f.ours),
            "moved_from": f.moved_from,
            "delete_path": f.delete_path,
            "message": f.message,
        }
        for f in rep.files
    ]


def replay_from(state: State, d: list[dict]) -> PatchReplay:
    return PatchReplay(
        [
            FileReplay(
                x["path"],
                x["new_path"],
                x["how"],
                state.get(x["result"]),
                x["mode"],
                state.get(x["ours"]),
                None,
                x["moved_from"],
                None,
                [],
                x["message"],
                x["delete_path"],
            )
            for x in d
        ]
    )


def stop(s: Session, state: State, index: int, rep: PatchReplay, report: RebaseReport) -> RebaseReport:
    """Save the session and write the conflicted files out for editing; ``report`` (status stopped)
    says where they are."""
    if not state.stopped:
        state.clear()
        state.backup(state.dir / "backup", s.ledger_files)
    res = s.results[index]
    work = []
    for f in rep.files:
        if f.how == F_CONFLICT:
            work.append(state.write_work(f.new_path or f.path, f.result if f.result is not None else b""))
        elif f.how == BROKEN:
            # the body does not fit even the old base: give the human the new base's file to edit
            dest = f.new_path or s.move(f.path).path or f.path
            f.new_path = dest
            work.append(state.write_work(dest, s.new.read(dest) or b""))
    state.save(
        {
            "version": 1,
            "ledger": s.ledger.path.name,
            "target": s.target.name,
            **s.bases.record(),
            "pr_merges": dict(s.pr_merges),
            "interactive": s.interactive,
            "index": index,
            "stopped_at": res.id,
            "results": [asdict(r) for r in s.results],
            "new_bodies": {k: state.put(v) for k, v in s.new_bodies.items()},
            "old_tree": _tree_json(state, s.old),
            "new_tree": _tree_json(state, s.new),
            "replay": _replay_json(state, rep),
            "work": work,
            "started": time.time(),
            "ledger_sha256": sha256_bytes(s.ledger.path.read_bytes()),
        }
    )
    report.stopped_at, report.work_files, report.state_dir = res.id, work, str(state.dir.relative_to(s.root))
    return report


def resume(ledger_path: Path) -> tuple[State, dict, Session]:
    ledger_path = Path(ledger_path)
    ledger = ledger_mod.load_ledger(ledger_path)
    state = State(ledger.root)
    if not state.stopped:
        raise InputError("no rebase is stopped here", hint="start one with `patchset rebase --onto REF --interactive`")
    d = state.load()
    if sha256_bytes(ledger_path.read_bytes()) != d["ledger_sha256"]:
        raise InputError(
            f"{ledger_path.name} changed since the rebase stopped",
            hint="run `patchset rebase --abort` (it restores the ledger as it was) and start again",
        )
    series = load_series(ledger, d["target"], d["onto"])
    bases = reopen(d, series.paths)
    try:
        s = open_session(ledger, series, bases, d["pr_merges"], d["interactive"])
    except BaseException:
        bases.close()
        raise
    s.results = [PatchResult.from_json(r) for r in d["results"]]
    s.new_bodies = {k: state.get(v) or b"" for k, v in d["new_bodies"].items()}
    s.old = _tree_from(state, s.old.store, d["old_tree"])
    s.new = _tree_from(state, s.new_base, d["new_tree"])
    if [p.id for p in s.patches[: d["index"] + 1]] != [r.id for r in s.results]:
        s.close()
        raise InputError("the series changed since the rebase stopped", hint="run `patchset rebase --abort`")
    return state, d, s
