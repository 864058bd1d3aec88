"""What the gate remembers between runs: the last upstream commit it judged, per target.

The gate does nothing when upstream has not moved since the last run (same commit, same series,
same test selection), so a nightly job costs a ``git rev-parse`` when there is nothing new. The
state also keeps the last commit where the series replayed cleanly (``last_clean``), the lower
bound when a later commit breaks a patch and the gate looks for the first bad commit.

Kept as JSON in the repository (``.patchset/gate-state.json`` beside the ledger by default) or
wherever the workflow caches it; written atomically.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from patchset import atomic
from patchset.errors import InputError
from patchset.ledger.model import Ledger

STATE_VERSION = 1
DEFAULT_STATE = ".patchset/gate-state.json"


@dataclass
class Judgement:
    """The gate's last word on one target."""

    upstream: str  # where upstream came from ("releases:vllm", a path or a URL)
    judged: str  # the upstream commit judged last
    judged_label: str
    verdict: str  # green | red
    ledger_digest: str
    tags: list[str] = field(default_factory=list)
    last_clean: str = ""  # the newest judged commit the whole series replayed onto without conflict
    last_clean_label: str = ""
    last_green: str = ""  # the newest judged commit where everything passed
    last_green_label: str = ""
    failing: list[str] = field(default_factory=list)
    judged_at: str = ""

    def same_question(self, upstream: str, commit: str, digest: str, tags: list[str]) -> bool:
        """True when a new run would ask exactly what this judgement answered."""
        return (self.upstream, self.judged, self.ledger_digest, sorted(self.tags)) == (
            upstream,
            commit,
            digest,
            sorted(tags),
        )


def default_state_path(ledger: Ledger) -> Path:
    return ledger.root / DEFAULT_STATE


def load_state(path: Path) -> dict[str, Judgement]:
    """``{target: Judgement}``; an absent file is an empty state."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise InputError(f"cannot read the gate state {path}: {exc.strerror or exc}") from exc
    try:
        doc = json.loads(raw)
        if doc.get("version") != STATE_VERSION:
            raise ValueError(f"version {doc.get('version')!r}, expected {STATE_VERSION}")
        return {name: Judgement(**d) for name, d in doc["targets"].items()}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InputError(
            f"{path}: not a gate state file ({exc})",
            hint="delete it: the next gate run judges upstream afresh and writes a new one",
        ) from None


def save_state(path: Path, states: dict[str, Judgement]) -> None:
    doc: dict[str, Any] = {"version": STATE_VERSION, "targets": {k: asdict(v) for k, v in sorted(states.items())}}
    atomic.write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def ledger_digest(ledger: Ledger, target: str) -> str:
    """sha256 over the ledger, its lock and every body of ``target``: a changed series is a new question."""
    h = hashlib.sha256()
    for path in [ledger.path, ledger.lock_path] + [ledger.body_file(p) for p in ledger.patches if p.target == target]:
        h.update(str(path.relative_to(ledger.root) if path.is_relative_to(ledger.root) else path).encode())
        h.update(b"\0")
        try:
            h.update(path.read_bytes())
        except OSError:
            h.update(b"<absent>")
        h.update(b"\0")
    return h.hexdigest()
