"""What the gate remembers between runs: the last upstream commit it judged, per target.

The gate does nothing when upstream has not moved (same commit, series and test selection), and
keeps the last commit where the series replayed cleanly (``last_clean``), the lower bound of a
bisection. JSON beside the ledger (``.patchset/gate-state.json``) or wherever the workflow caches
it, written atomically and sealed (``patchset.sealed``): a state this installation did not write
cannot answer "nothing to do" and is ``ForeignState`` (exit 2). A workflow keeps the key with the
state (``$PATCHSET_STATE``, ci/workflows/gate.yml).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from patchset.ci.report import GateStatus
from patchset.errors import InputError
from patchset.ledger.model import Ledger
from patchset.sealed import read_sealed, shown_path, target_names, write_sealed

STATE_VERSION = 1
DEFAULT_STATE = ".patchset/gate-state.json"
KIND = "gate state"  # sealed into the file: no other recorded state passes for it
MAX_TEXT = 4096  # characters of one recorded value (labels, upstream locations, test ids)
_SHA = re.compile(r"^([0-9a-f]{7,64})?$")
_SHAS = ("judged", "last_clean", "last_green")


@dataclass
class Judgement:
    """The gate's last word on one target."""

    upstream: str  # where upstream came from ("releases:vllm", a path or a URL)
    judged: str  # the upstream commit judged last
    judged_label: str
    verdict: GateStatus  # green or red
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
        asked = (self.upstream, self.judged, self.ledger_digest, sorted(self.tags))
        return asked == (upstream, commit, digest, sorted(tags))


def default_state_path(ledger: Ledger) -> Path:
    return ledger.root / DEFAULT_STATE


def _names(doc: dict[str, Any]) -> list[object]:
    """What a foreign state names, for the refusal: each target with its judged commit and verdict."""
    return target_names(doc, lambda d: [d[k] for k in ("judged", "verdict") if isinstance(d.get(k), str)])


def _judgement(path: Path, name: object, d: object) -> Judgement:
    """One target's judgement, every field checked (type, size; commits are shas)."""
    where = f"{shown_path(path)}: target {name!r}"
    hint = "delete it: the next gate run judges upstream afresh and writes a new one"
    if not isinstance(name, str) or not name or len(name) > MAX_TEXT or not isinstance(d, dict):
        raise InputError(f"{where} is not a judgement", hint=hint)
    known = {f.name: f for f in dataclasses.fields(Judgement)}
    for key, value in d.items():
        f = known.get(key)
        if f is None:
            raise InputError(f"{where}: unknown field {key!r}", hint=hint)
        if f.type == "list[str]":
            ok = isinstance(value, list) and len(value) <= MAX_TEXT and all(isinstance(v, str) for v in value)
            ok = ok and all(len(v) <= MAX_TEXT for v in value)
        else:
            ok = isinstance(value, str) and len(value) <= MAX_TEXT
        if ok and key in _SHAS:
            ok = bool(_SHA.match(value))
        if not ok:
            raise InputError(f"{where}: {key} is not what the gate records ({type(value).__name__})", hint=hint)
    required = [
        k for k, f in known.items() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [k for k in required if k not in d]
    if missing:
        raise InputError(f"{where}: no {missing[0]}", hint=hint)
    return Judgement(**d)


def load_state(path: Path) -> dict[str, Judgement]:
    """``{target: Judgement}``; an absent file is an empty state. A state this installation did not
    write is ``ForeignState`` (exit 2), one with a malformed field ``InputError``."""
    hint = (
        "it came with the repository, a CI cache or another machine (or an older patchset wrote it): remove "
        "it, and the next gate run judges upstream afresh; a workflow that keeps the state between runs "
        "must keep $PATCHSET_STATE (the key that seals it) too"
    )
    try:
        doc = read_sealed(Path(path), KIND, what="a gate state", hint=hint, names=_names)
    except OSError as exc:  # a read error past the open (read_sealed words the rest)
        raise InputError(f"cannot read the gate state {path}: {exc.strerror or exc}") from None
    if doc is None:
        return {}
    targets = doc.get("targets")
    if doc.get("version") != STATE_VERSION or not isinstance(targets, dict):
        raise InputError(
            f"{shown_path(path)}: not a gate state file (version {doc.get('version')!r}, expected {STATE_VERSION})",
            hint="delete it: the next gate run judges upstream afresh and writes a new one",
        )
    return {name: _judgement(path, name, d) for name, d in targets.items()}


def save_state(path: Path, states: dict[str, Judgement]) -> None:
    doc: dict[str, Any] = {"version": STATE_VERSION, "targets": {k: asdict(v) for k, v in sorted(states.items())}}
    write_sealed(Path(path), KIND, doc)


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
