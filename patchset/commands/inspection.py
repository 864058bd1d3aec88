"""Inspection of a ledger against its files: ``validate``, ``list`` and ``show``.

Everything here is read-only and returns plain data (dicts ready for ``--json``); the CLI renders
it. "Body not imported" is a state of its own, not an error: a fresh clone of a ledger whose bodies
belong to someone else is valid.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from patchset.commands.interrupted import interruptions
from patchset.errors import PatchFormatError, UnsafePathError
from patchset.ledger.lock import sha256_bytes
from patchset.ledger.model import Ledger, Patch, Target

BODY_PRESENT = "present"
BODY_MISSING = "not imported"
BODY_MISMATCH = "hash mismatch"
BODY_UNLOCKED = "not in lock"


@dataclass
class FileStat:
    """One file of a diffstat: its path, operation and line counts."""

    path: str
    added: int
    removed: int
    op: str


_STAT_OPS = {"create": "new", "delete": "deleted", "rename": "renamed", "copy": "renamed", "modify": "modified"}


def diffstat(body: bytes, strip: int = 1) -> list[FileStat]:
    """Per-file added/removed line counts of a patch body, parsed by ``diffs.parse_patch`` (the
    engine's parser). A renamed or copied file is named by its new path, any other by the path it
    reads (a new file: the one it creates). Names with fewer components than ``strip`` are counted
    as written; a body that does not parse has no stat (``[]``)."""
    from patchset.patchfmt.diffs import parse_patch  # only `show` needs the parser: list starts faster
    from patchset.patchfmt.headers import split_header

    _, diff = split_header(body)
    try:
        files = parse_patch(diff, strip)
    except PatchFormatError:
        try:
            files = parse_patch(diff, 0) if strip else []
        except PatchFormatError:
            return []
    out = []
    for fp in files:
        added, removed = fp.line_counts()  # counted by the reader: no hunk is built
        path = fp.new_path if fp.op in ("rename", "copy") and fp.new_path else fp.path
        out.append(FileStat(path=path, added=added, removed=removed, op=_STAT_OPS[fp.op]))
    return out


def body_state(ledger: Ledger, patch: Patch) -> tuple[str, bytes | None]:
    path = ledger.body_file(patch)
    if not path.is_file():
        return BODY_MISSING, None
    data = path.read_bytes()
    locked = ledger.lock.bodies.get(patch.id)
    if locked is None:
        return BODY_UNLOCKED, data
    return (BODY_PRESENT if locked == sha256_bytes(data) else BODY_MISMATCH), data


def body_problem(body: bytes, strip: int, source: str) -> str:
    """What the reader ``apply`` uses says of a body it cannot read ("" when it reads it)."""
    from patchset.patchfmt.diffs import parse_patch  # as in diffstat: list starts faster

    try:
        parse_patch(body, strip, source=source)
    except PatchFormatError as exc:
        return exc.message
    return ""


def patch_files(
    ledger: Ledger, patch: Patch, body: bytes | None = None, stats: list[FileStat] | None = None
) -> list[str]:
    """Files a patch touches: from its body when imported, else as the ledger declares.
    ``stats``: the body's ``diffstat`` when the caller has it already (parsed once per patch)."""
    if stats is None:
        if body is None:
            _, body = body_state(ledger, patch)
        stats = diffstat(body, ledger.strip_of(patch)) if body else []
    return [s.path for s in stats] if stats else list(patch.files)


LOCK_HINT = (
    "if the bodies are the ones you mean, record their hashes: run the apply again with --update-lock "
    "(`patchset apply --tree DIR --update-lock`) or re-import them (`patchset import`); "
    "else restore the lock from version control"
)


def lock_gap(ledger: Ledger) -> str | None:
    """What is wrong when the lock is missing or empty while patch bodies are imported: nothing
    (no body, no patched file) would be checked then, which is said, never taken as "nothing to
    check". ``None`` when the lock holds something or no body is imported."""
    lock = ledger.lock
    if lock.bodies or lock.heads or any(t.files or t.base_files for t in lock.targets.values()):
        return None
    imported = sum(1 for p in ledger.patches if ledger.body_file(p).is_file())
    if not imported:
        return None
    how = "missing" if not ledger.lock_path.exists() else "empty"
    return (
        f"{ledger.lock_path}: the lock is {how} but {imported} patch bod{'y is' if imported == 1 else 'ies are'} "
        "imported: no body and no patched file has a hash to be checked against"
    )


@dataclass
class ValidateReport:
    """What ``validate`` found: problems (exit 1) and warnings."""

    ledger: str
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    bodies: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    shared_files: dict[str, list[str]] = field(default_factory=dict)
    switches: dict[str, dict[str, Any]] = field(default_factory=dict)
    tests: dict[str, int] = field(default_factory=dict)
    untested: list[str] = field(default_factory=list)
    checked: int = 0  # bodies whose sha256 was compared with the lock
    not_checked: dict[str, int] = field(default_factory=dict)  # body state -> bodies that could not be

    @property
    def ok(self) -> bool:
        return not self.problems

    def coverage(self) -> str:
        """``5 checked; 23 not imported, not checked``: never an "ok" that hides what was not looked at."""
        text = f"{self.checked} checked"
        if self.not_checked:
            text += "; " + ", ".join(f"{n} {state}" for state, n in self.not_checked.items()) + ", not checked"
        return text

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"ok": self.ok}


def validate(ledger: Ledger) -> ValidateReport:
    """Check the ledger against its body files and lock (the schema was checked on load)."""
    rep = ValidateReport(ledger=str(ledger.path))
    for found in interruptions(ledger.root):
        (rep.problems if found.problem else rep.warnings).append(found.message)
    gap = lock_gap(ledger)
    if gap:
        rep.problems.append(f"{gap} ({LOCK_HINT})")
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    touched: dict[tuple[str, str], list[str]] = defaultdict(list)
    for p in ledger.patches:
        counts[p.target][p.state] += 1
        state, body = body_state(ledger, p)
        rep.bodies[p.id] = state
        if state in (BODY_PRESENT, BODY_MISMATCH):
            rep.checked += 1
        else:
            rep.not_checked[state] = rep.not_checked.get(state, 0) + 1
        if state == BODY_MISMATCH:
            rep.problems.append(
                f"{p.id}: body {p.body_path} does not match its sha256 in {ledger.lock_path.name}:"
                f" expected sha256 {ledger.lock.bodies.get(p.id)}, actual {sha256_bytes(body or b'')}"
                " (re-import it or run `patchset import` to record the new hash)"
            )
        elif state == BODY_UNLOCKED:
            rep.warnings.append(f"{p.id}: body {p.body_path} has no hash in the lock (run `patchset import`)")
        tgt = ledger.targets[p.target]
        stats: list[FileStat] = []
        if body is not None:
            stats = diffstat(body, ledger.strip_of(p))
            if not body.strip():
                rep.problems.append(f"{p.id}: {p.body_path} is empty: not a diff (import the patch again)")
            elif why := body_problem(body, ledger.strip_of(p), p.body_path):
                rep.problems.append(f"{p.id}: {why} (apply refuses it; import the patch again)")
            elif not stats:
                rep.problems.append(f"{p.id}: {p.body_path} contains no unified diff")
            else:
                rep.problems.extend(unsafe_paths(p, tgt, body))
            # compared through the path map: a layout-only difference is no difference
            declared = {tgt.canonical(name) for name in p.files}
            actual = {tgt.canonical(s.path) for s in stats}
            if declared and actual and declared != actual:
                rep.warnings.append(
                    f"{p.id}: files declared in the ledger {sorted(declared - actual)} differ from the "
                    f"body's {sorted(actual - declared)}"
                )
        if p.state == "active":
            for name in patch_files(ledger, p, body, stats):
                touched[(p.target, tgt.canonical(name))].append(p.id)
            if not p.tests:
                # a warning, not a problem: a ledger without tests is valid, only less proven
                rep.untested.append(p.id)
                rep.warnings.append(f"{p.id}: no test declared (declare one in its patch.tests, see docs/ledger.md)")
        if p.switches:
            rep.switches[p.id] = {"env": p.switches.env, "flags": p.switches.flags}
        if p.tests:
            rep.tests[p.id] = len(p.tests)
    for (tname, fname), ids in sorted(touched.items()):
        if len(ids) > 1:
            rep.shared_files[f"{tname}:{fname}"] = ids
    rep.counts = {t: dict(c) for t, c in counts.items()}
    rep.not_checked = {s: rep.not_checked[s] for s in (BODY_MISSING, BODY_UNLOCKED) if s in rep.not_checked}
    rep.warnings.extend(f"extra body not in the ledger: {rel}" for rel in _extra_bodies(ledger))
    _check_scripts(ledger, rep)
    known = {p.id for p in ledger.patches}  # once: a set per lock entry made validate quadratic
    for pid in ledger.lock.bodies:
        if pid not in known:
            rep.warnings.append(f"lock has a hash for unknown patch {pid!r}")
    return rep


def unsafe_paths(patch: Patch, target: Target, body: bytes) -> list[str]:
    """What in ``body`` names a path apply would refuse: ``..``, an absolute path, patchset's state
    directories (``.patchset``, ``.patchset-txn``) or ``.git``, each with the body's file and line.
    The names are read after ``-p`` (the patch's strip, else its target's), as apply reads them."""
    from patchset.confine import check_relative
    from patchset.patchfmt.diffs import parse_patch

    strip = patch.strip_on(target)
    try:
        files = parse_patch(body, strip, source=patch.body_path)
    except PatchFormatError:
        return []  # no diff to read names from: reported as such by the caller
    out = []
    for fp in files:
        for name in dict.fromkeys(n for n in (fp.old_path, fp.new_path) if n is not None):
            try:
                check_relative(name, what=f"{patch.id}: {patch.body_path}:{fp.line_no}")
            except UnsafePathError as exc:
                out.append(
                    f"{exc.message}; apply refuses it (fix the patch's file names and import it again, "
                    "or set its strip if the names carry a prefix)"
                )
    return out


def _check_scripts(ledger: Ledger, rep: ValidateReport) -> None:
    """A generated patch's script against the sha256 the lock recorded when its body was made."""
    import shlex

    for p in ledger.patches:
        gen = p.generate
        if gen is None or not gen.script:
            continue
        f = ledger.root / gen.script
        again = (
            f"run `patchset import --script {shlex.quote(shlex.join(gen.command))} --id {p.id} "
            f"--target {p.target}` to make its body again"
        )
        locked = ledger.lock.scripts.get(p.id)
        if not f.is_file():
            rep.problems.append(f"{p.id}: its script {gen.script} is missing (the generate command cannot run)")
        elif locked is None:
            rep.warnings.append(f"{p.id}: its script {gen.script} has no sha256 in the lock ({again})")
        else:
            actual = sha256_bytes(f.read_bytes())
            if actual != locked:
                rep.problems.append(
                    f"{p.id}: its script {gen.script} changed since its body was made: expected sha256 {locked}, "
                    f"actual {actual} ({again})"
                )


def _extra_bodies(ledger: Ledger) -> list[Path]:
    """Body files under ``patchset/series`` that no patch names. Paths are compared as written
    first (one string each); only a file that matches none that way is resolved (symlinks), so a
    ledger of 10,000 bodies is not 20,000 ``realpath`` walks."""
    import os.path

    series_root = ledger.root / "patchset" / "series"
    if not series_root.is_dir():
        return []
    named = {os.path.normpath(ledger.body_file(p)) for p in ledger.patches}
    resolved: set[Path] | None = None
    extra = []
    for f in sorted(series_root.rglob("*")):
        if f.suffix not in (".patch", ".diff") or os.path.normpath(f) in named or not f.is_file():
            continue
        if resolved is None:
            resolved = {ledger.body_file(p).resolve() for p in ledger.patches}
        if f.resolve() not in resolved:
            extra.append(f.relative_to(ledger.root))
    return extra


def list_rows(ledger: Ledger, target: str | None = None, states: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    rows = []
    order: Counter[str] = Counter()
    for p in ledger.patches:
        if target and p.target != target:
            continue
        if states and p.state not in states:
            continue
        order[p.target] += 1
        state, body = body_state(ledger, p)
        rows.append(
            {
                "order": order[p.target],
                "id": p.id,
                "target": p.target,
                "origin": p.origin,
                "kind": p.kind.value,
                "prs": p.upstream.prs or p.upstream.ports,
                "pr_state": p.status.pr_state,
                "state": p.state,
                "files": patch_files(ledger, p, body),
                "body": state,
                "title": p.title,
            }
        )
    return rows


def show(ledger: Ledger, patch_id: str) -> dict[str, Any]:
    p = ledger.get(patch_id)
    state, body = body_state(ledger, p)
    d = asdict(p)  # generate and overlay are dataclasses: tables in --json (None when absent)
    d["kind"] = p.kind.value
    d["body_path"] = p.body_path
    d["body_state"] = state
    d["body_sha256"] = sha256_bytes(body) if body is not None else None
    d["locked_sha256"] = ledger.lock.bodies.get(p.id)
    d["diffstat"] = [asdict(s) for s in diffstat(body)] if body else []
    d["order"] = [q.id for q in ledger.series(p.target, states=("active",))].index(p.id) + 1 if p.active else None
    for k in ("recorded", "merged_at"):
        v = d["status"].get(k)
        d["status"][k] = v.isoformat() if v else None
    return d
