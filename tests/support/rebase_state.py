"""Rebase state as this installation writes it (sealed), for tests that need one in place without
running a rebase: an interrupted write (``commit.json``) or a session stopped at a conflict
(``state.json``). The product's own writer seals them (``patchset.sealed``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from patchset.rebase.state import BACKUPS_DIR, KIND_COMMIT, KIND_STATE, STATE_DIR, STATE_VERSION
from patchset.sealed import write_sealed


def stopped_session(onto: str = "v2", stopped_at: str = "a", **fields: Any) -> dict[str, Any]:
    """The fields ``rebase --interactive`` records when it stops (one patch, in conflict; empty trees)."""
    return {
        "version": STATE_VERSION,
        "ledger": "patches.toml",
        "target": "t",
        "onto": onto,
        "old_ref": "v1",
        "old": "0" * 40,
        "new": "1" * 40,
        "new_label": onto,
        "new_version": "",
        "location": {"kind": "repo", "path": "/nonexistent"},
        "pr_merges": {},
        "interactive": True,
        "index": 0,
        "stopped_at": stopped_at,
        "results": [{"id": stopped_at, "verdict": "conflict", "files": []}],
        "new_bodies": {},
        "old_tree": {},
        "new_tree": {},
        "replay": [],
        "work": [],
        "started": 0.0,
        "ledger_sha256": "0" * 64,
        **fields,
    }


def seal_stopped(ledger_root: Path, **fields: Any) -> Path:
    path = ledger_root / STATE_DIR / "state.json"
    write_sealed(path, KIND_STATE, stopped_session(**fields))
    return path


def seal_committing(ledger_root: Path, files: dict[str, str | None] | None = None, backup: str = "x") -> Path:
    path = ledger_root / STATE_DIR / "commit.json"
    write_sealed(
        path, KIND_COMMIT, {"version": STATE_VERSION, "backup": f"{BACKUPS_DIR}/{backup}", "files": files or {}}
    )
    return path
