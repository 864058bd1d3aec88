"""``patchset audit DIR``: hold the ledger against a directory of real bodies, without importing.

A ledger can be written from facts before its bodies are at hand (the production ledger was). When
the real files turn up — a quilt directory with its ``series``, numbered patches, an
``EXPECTED.sha256`` — this module says where the ledger and the files disagree: which ledger id each
file is, the order of the ``series`` file against the ledger's, the files each body changes against
the files its entry declares, bodies the ledger lacks and entries with no body, and the lock's
hashes against the files. Nothing is written; every path comparison goes through
``Target.canonical`` (the target's path map), so a layout-only difference is no finding.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from patchset.commands.importer import PATCH_SUFFIXES
from patchset.commands.inspection import diffstat
from patchset.errors import InputError
from patchset.ledger.lock import parse_expected, sha256_bytes
from patchset.ledger.model import Ledger, Patch

_NUMBERED = re.compile(r"^(\d+)[-_.]")


@dataclass
class Finding:
    """One disagreement between the ledger and the directory."""

    kind: str  # unmatched-body, no-body, ambiguous, order, held-in-series, series-missing, files, no-diff,
    # body-hash, expected-hash, expected-extra, expected-missing
    file: str
    message: str
    line: int | None = None
    patch: str | None = None

    def render(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message}"


@dataclass
class AuditReport:
    """What ``audit`` found: matched bodies and findings."""

    directory: str
    ledger: str
    matched: dict[str, str] = field(default_factory=dict)  # patch id -> body file (relative to the directory)
    series_files: list[str] = field(default_factory=list)
    expected_files: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def lines(self) -> list[str]:
        return [f.render() for f in self.findings]

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"ok": self.ok}


@dataclass
class _Series:
    """One series file of the audited directory: its path and its entries with their lines."""

    path: Path
    entries: list[tuple[int, str]]  # (line, file name as written)


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _stem(name: str) -> str:
    for suf in PATCH_SUFFIXES:
        if name.endswith(suf):
            return name[: -len(suf)]
    return name


def _read_series(path: Path) -> _Series:
    """A quilt ``series`` file: one patch per line, options after it, ``#`` comments."""
    entries = []
    for lineno, raw in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if line:
            entries.append((lineno, line.split()[0]))
    return _Series(path, entries)


def _scan(directory: Path) -> tuple[list[Path], list[_Series], list[Path]]:
    bodies, series, expected = [], [], []
    for f in sorted(directory.rglob("*")):
        rel = f.relative_to(directory)
        if not f.is_file() or any(part.startswith(".") for part in rel.parts):
            continue
        if f.suffix in PATCH_SUFFIXES:
            bodies.append(f)
        elif f.name == "series":
            series.append(_read_series(f))
        elif f.name.endswith(".sha256"):
            expected.append(f)
    return bodies, series, expected


def _candidates(p: Patch) -> set[str]:
    """File names a patch's body may carry: its body path, its repo-file source, ``<id>.patch|.diff``."""
    names = {Path(p.body_path).name, *(p.id + s for s in PATCH_SUFFIXES)}
    if p.source.kind == "repo-file" and ":" in p.source.ref:
        names.add(Path(p.source.ref.rsplit(":", 1)[1]).name)
    return names


def _match(name: str, patches: list[Patch]) -> list[Patch]:
    """The ledger entries a file is: by file name, else by id with a leading number dropped."""
    exact = [p for p in patches if name in _candidates(p)]
    if exact:
        return exact
    stem = _stem(name)
    if m := _NUMBERED.match(stem):
        return [p for p in patches if p.id == stem[m.end() :]]
    return []


@dataclass
class _Audit:
    """One audit's state, as its steps fill it in."""

    ledger: Ledger
    root: Path
    rep: AuditReport
    by_name: dict[str, Patch] = field(default_factory=dict)  # a matched body's file name -> its entry
    touched: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # target -> canonical paths
    dir_target: dict[Path, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))


def audit(ledger: Ledger, directory: Path, target: str | None = None) -> AuditReport:
    """Compare the ledger with the bodies, series files and EXPECTED.sha256 files under ``directory``."""
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory", hint="pass the directory holding the bodies")
    if target is not None and target not in ledger.targets:
        raise InputError(f"unknown target {target!r}", hint=f"one of: {', '.join(ledger.targets)}")
    run = _Audit(ledger, directory, AuditReport(directory=str(directory), ledger=str(ledger.path)))
    bodies, series_list, expected_files = _scan(directory)
    _match_bodies(run, bodies, target)
    _check_bodies(run)
    _check_series(run, series_list)
    _check_numbered(run, {s.path.parent for s in series_list})
    _check_expected(run, expected_files, target)
    run.rep.findings.sort(key=lambda f: (f.file != ledger.path.name, f.file, f.line or 0))
    return run.rep


def _match_bodies(run: _Audit, bodies: list[Path], target: str | None) -> None:
    """Each body file matched to the entry whose id or file name it has."""
    ledger, root, rep, by_name = run.ledger, run.root, run.rep, run.by_name
    patches = [p for p in ledger.patches if target is None or p.target == target]
    ledger_name, directory = ledger.path.name, root
    by_id: dict[str, list[Path]] = defaultdict(list)
    for f in bodies:
        found = _match(f.name, patches)
        if not found:
            if target is None or not _match(f.name, ledger.patches):
                why = "body not in the ledger (no entry has this id or file name)"
                rep.findings.append(Finding("unmatched-body", _rel(f, root), why))
            continue
        if len(found) > 1:
            ids = ", ".join(p.id for p in found)
            rep.findings.append(Finding("ambiguous", _rel(f, root), f"matches several ledger entries: {ids}"))
            continue
        by_id[found[0].id].append(f)
    for p in patches:
        files = by_id.get(p.id, [])
        if len(files) > 1:
            why = f"{p.id}: several bodies match it: {', '.join(_rel(f, root) for f in files)}"
            rep.findings.append(Finding("ambiguous", ledger_name, why, p.line, p.id))
        elif files:
            rep.matched[p.id] = _rel(files[0], root)
            by_name[files[0].name] = p
        elif p.active:
            why = f"{p.id}: no body for this entry in {directory}"
            rep.findings.append(Finding("no-body", ledger_name, why, p.line, p.id))


def _check_bodies(run: _Audit) -> None:
    """Declared files against each body's files, and the lock's body hashes."""
    ledger, root, rep, touched, dir_target = run.ledger, run.root, run.rep, run.touched, run.dir_target
    for pid, rel in rep.matched.items():
        p = ledger.get(pid)
        t = ledger.targets[p.target]
        f = root / rel
        dir_target[f.parent][p.target] += 1
        data = f.read_bytes()
        stats = diffstat(data, p.strip_on(t))
        if not stats:
            rep.findings.append(Finding("no-diff", rel, f"{pid}: contains no unified diff", patch=pid))
            continue
        actual = {t.canonical(s.path) for s in stats}
        if p.active:
            touched[p.target] |= actual
        declared = {t.canonical(x) for x in p.files}
        if declared and declared != actual:  # an entry that declares none has nothing to disagree with
            parts = []
            if declared - actual:
                parts.append(f"declares {', '.join(sorted(declared - actual))}, which the body does not change")
            if actual - declared:
                parts.append(
                    f"the body changes {', '.join(sorted(actual - declared))}, which the ledger does not declare"
                )
            rep.findings.append(Finding("files", rel, f"{pid}: " + "; ".join(parts), patch=pid))
        locked, digest = ledger.lock.bodies.get(pid), sha256_bytes(data)
        if locked is not None and locked != digest:
            why = f"{pid}: sha256 {digest[:12]}… differs from the lock's {locked[:12]}…"
            rep.findings.append(Finding("body-hash", rel, why, patch=pid))


def _check_series(run: _Audit, series_list: list[_Series]) -> None:
    """The order of each series file against the ledger's."""
    ledger, root, rep, by_name = run.ledger, run.root, run.rep, run.by_name
    for s in series_list:
        srel = _rel(s.path, root)
        rep.series_files.append(srel)
        order: list[tuple[int, Patch]] = []
        for lineno, name in s.entries:
            if not (s.path.parent / name).is_file():
                why = f"names {name!r}, which is not in {s.path.parent}"
                rep.findings.append(Finding("series-missing", srel, why, lineno))
                continue
            entry = by_name.get(Path(name).name)
            if entry is None:
                continue  # an unmatched body: reported above
            if not entry.active:
                why = f"applies {entry.id}, which the ledger marks {entry.state}"
                rep.findings.append(Finding("held-in-series", srel, why, lineno, entry.id))
                continue
            order.append((lineno, entry))
        _order_findings(ledger, order, srel, rep)


def _check_numbered(run: _Audit, seen_dirs: set[Path]) -> None:
    """Numbered patches without a series file: their numbers are the order."""
    ledger, root, rep, by_name = run.ledger, run.root, run.rep, run.by_name
    numbered: dict[Path, list[tuple[int, Patch, str]]] = defaultdict(list)
    for name, p in by_name.items():
        f = root / rep.matched[p.id]
        m = _NUMBERED.match(name)
        if f.parent not in seen_dirs and m and p.active:
            numbered[f.parent].append((int(m.group(1)), p, _rel(f, root)))
    for items in numbered.values():
        items.sort(key=lambda x: x[0])
        pos = {p.id: i for i, p in enumerate(ledger.series(items[0][1].target))}
        for a, b in itertools.pairwise(items):
            if pos[a[1].id] > pos[b[1].id]:
                why = f"{b[1].id}: numbered after {a[1].id} here, but the ledger applies it before"
                rep.findings.append(Finding("order", b[2], why, patch=b[1].id))


def _check_expected(run: _Audit, expected_files: list[Path], target: str | None) -> None:
    """EXPECTED.sha256 against the lock and the files the series changes, line by line for the
    target that owns each file (one shared file may list several targets' files, as import reads it)."""
    ledger, root, rep, touched, dir_target = run.ledger, run.root, run.rep, run.touched, run.dir_target
    for ef in expected_files:
        erel = _rel(ef, root)
        rep.expected_files.append(erel)
        raw = parse_expected(ef)
        lines = _expected_lines(ef)
        fallback = _expected_target(ledger, ef.parent, raw, dir_target, touched, target)
        per_target, unowned = _split_expected(ledger, raw, touched, target, fallback)
        if not per_target:
            rep.findings.append(Finding("expected-extra", erel, "cannot tell which target these hashes belong to"))
            continue
        for written in unowned:
            why = f"{written}: no target's series changes this file"
            rep.findings.append(Finding("expected-extra", erel, why, lines.get(written)))
        for tname, want in per_target.items():
            _expected_findings(ledger, tname, want, lines, touched, erel, rep)


def _order_findings(ledger: Ledger, order: list[tuple[int, Patch]], srel: str, rep: AuditReport) -> None:
    """Name the fewest entries whose place in the series file differs from the ledger's order.

    The entries on a longest run that agrees with the ledger stay; every other one is out of place
    and is reported on its line, with its neighbour in the ledger's order.
    """
    if not order:
        return
    ranks = {p.id: i for tname in {p.target for _, p in order} for i, p in enumerate(ledger.series(tname))}
    seq = [ranks[p.id] for _, p in order]
    keep = _longest_increasing(seq)
    for i, (lineno, p) in enumerate(order):
        if i in keep:
            continue
        series_ids = [q.id for q in ledger.series(p.target)]
        k = series_ids.index(p.id)
        where = f"after {series_ids[k - 1]}" if k else "first"
        why = f"{p.id}: out of the ledger's order (the ledger applies it {where})"
        rep.findings.append(Finding("order", srel, why, lineno, p.id))


def _longest_increasing(seq: list[int]) -> set[int]:
    """Indices of one longest strictly increasing subsequence (patience sorting, O(n log n))."""

    tails: list[int] = []
    tails_idx: list[int] = []
    prev = [-1] * len(seq)
    for i, v in enumerate(seq):
        k = bisect.bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
            tails_idx.append(i)
        else:
            tails[k] = v
            tails_idx[k] = i
        prev[i] = tails_idx[k - 1] if k else -1
    out: set[int] = set()
    i = tails_idx[-1] if tails_idx else -1
    while i >= 0:
        out.add(i)
        i = prev[i]
    return out


def _expected_lines(path: Path) -> dict[str, int]:
    """Line number of each path in an EXPECTED.sha256 file (as written, after ``parse_expected``'s cleaning)."""
    out = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.split(None, 1)
        if len(parts) == 2 and not line.lstrip().startswith("#"):
            name = parts[1].strip().lstrip("*")
            out[name[2:] if name.startswith("./") else name] = lineno
    return out


def _split_expected(
    ledger: Ledger, raw: dict[str, str], touched: dict[str, set[str]], only: str | None, fallback: str | None
) -> tuple[dict[str, dict[str, tuple[str, str]]], list[str]]:
    """``{target: {canonical path: (sha256, path as written)}}``: each line goes to the target whose
    patched or locked file it names (any layout, any install prefix: ``importer._owner``), the
    others to ``fallback``, the target the whole file is for (``_expected_target``); and the lines
    that have neither."""
    from patchset.commands.importer import _owner

    names = [only] if only is not None else list(ledger.targets)
    keys: dict[str, tuple[str, str]] = {}
    for name in names:
        t = ledger.targets[name]
        for path in (*sorted(touched.get(name, set())), *ledger.lock.target(name).files):
            key = t.canonical(path)
            for spelling in t.spellings(path, key):
                keys.setdefault(spelling, (name, key))
    out: dict[str, dict[str, tuple[str, str]]] = {}
    unowned: list[str] = []
    for written, digest in raw.items():
        owner = _owner(written, keys) or _owner(written.lstrip("/"), keys)
        if owner is None and fallback is not None:
            owner = (fallback, ledger.targets[fallback].canonical(written))
        if owner is None:
            unowned.append(written)
        else:
            out.setdefault(owner[0], {})[owner[1]] = (digest, written)
    if not out and fallback is not None:
        out[fallback] = {}
    return out, unowned


def _expected_findings(
    ledger: Ledger,
    tname: str,
    want: dict[str, tuple[str, str]],
    lines: dict[str, int],
    touched: dict[str, set[str]],
    erel: str,
    rep: AuditReport,
) -> None:
    lock_files = {ledger.targets[tname].canonical(k): v for k, v in ledger.lock.target(tname).files.items()}
    for path, (digest, written) in sorted(want.items()):
        line = lines.get(written)
        if path in lock_files and lock_files[path] != digest:
            why = f"{written}: sha256 differs from the lock's for {path}"
            rep.findings.append(Finding("expected-hash", erel, why, line))
        elif lock_files and path not in lock_files:
            rep.findings.append(Finding("expected-extra", erel, f"{written}: the lock has no hash for {path}", line))
        if touched[tname] and path not in touched[tname]:
            why = f"{written}: no body of the {tname} series changes {path}"
            rep.findings.append(Finding("expected-extra", erel, why, line))
    for path in sorted(set(lock_files) - set(want)):
        rep.findings.append(Finding("expected-missing", erel, f"the lock's {path} has no line here"))
    for path in sorted(touched[tname] - set(want)):
        rep.findings.append(
            Finding("expected-missing", erel, f"the {tname} series changes {path}, which has no line here")
        )


def _expected_target(
    ledger: Ledger,
    folder: Path,
    raw: dict[str, str],
    dir_target: dict[Path, Counter[str]],
    touched: dict[str, set[str]],
    only: str | None,
) -> str | None:
    """The target an EXPECTED.sha256 describes: the one given, that of the bodies beside it, else
    the one whose patched files it names most."""
    if only is not None:
        return only
    if dir_target.get(folder):
        return dir_target[folder].most_common(1)[0][0]
    if len(ledger.targets) == 1:
        return next(iter(ledger.targets))
    best = None
    score = 0
    for name, t in ledger.targets.items():
        declared = {t.canonical(f) for p in ledger.series(name) for f in p.files} | touched.get(name, set())
        n = sum(1 for k in raw if t.canonical(k) in declared)
        if n > score:
            best, score = name, n
    return best
