"""The proofs verify remembers between runs: when each patch's without-run last proved its verdict.

An engine start costs up to an hour on the cluster, and most nights nothing a patch rests on
moved. The planner (``verify.plan``) carries a verdict only from a proof recorded here (night,
base, body, each test's parameters and without-run result, digests of the watched files), with
each patch's last class and the night count (``--full-every``). It decides what is *not* tested,
so it is trusted only when sealed by this installation (kind ``verify proofs``; else
``ForeignState``), and still checked field by field (a malformed one is ``InputError``).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from patchset.errors import InputError
from patchset.sealed import read_sealed, shown_path, target_names, write_sealed
from patchset.verify.outcomes import CLASSES
from patchset.verify.testrun import FAIL, PASS

VERSION = 1
KIND = "verify proofs"
MAX_BYTES = 64 << 20
MAX_TEXT = 4096
MAX_PATCHES = 4096
MAX_TESTS = 256
MAX_WATCH = 4096
MAX_STARTS = 32  # recorded start durations per engine
_DIGEST = re.compile(r"^([0-9a-f]{16}|absent|unsafe)$")
_HINT = (
    "it came with the repository, a CI cache or another machine (or an older patchset wrote it): remove "
    "it, and the next run proves every patch afresh; a workflow that keeps it between runs must keep "
    "$PATCHSET_STATE (the key that seals it) too"
)


@dataclass
class WithoutProof:
    """One test's without-run, as it proved the verdict (or, in ``with_tests``, its run with the series)."""

    spec: str  # digest of what the test measures and where (checks, model, engine)
    outcome: str  # pass | fail
    reason: str = ""
    checks: list[dict[str, Any]] = field(default_factory=list)  # per check: check, ok, failed_cases


@dataclass
class PatchProof:
    """The run that last proved a patch's verdict, and what it rested on."""

    night: int
    at: str  # when (UTC)
    base: str  # the base (upstream) it was proven on
    klass: str  # the patch's class that night
    body: str  # digest of its body
    tests: dict[str, WithoutProof] = field(default_factory=dict)
    watch: dict[str, list[str]] = field(default_factory=dict)  # path -> [base, with, without] digests
    why: dict[str, str] = field(default_factory=dict)  # path -> why it is watched
    # tests on a switched configuration: their run with the series, carried when nothing moved
    with_tests: dict[str, WithoutProof] = field(default_factory=dict)

    def run_name(self) -> str:
        return run_name(self.night, self.at, self.base)


@dataclass
class LastVerdict:
    """A patch's class in the last run that tested it (proven there or carried)."""

    klass: str
    night: int
    at: str
    base: str


@dataclass
class TargetHistory:
    """One target's proofs."""

    nights: int = 0  # runs recorded so far
    proofs: dict[str, PatchProof] = field(default_factory=dict)
    last: dict[str, LastVerdict] = field(default_factory=dict)
    starts: dict[str, list[float]] = field(default_factory=dict)  # engine -> seconds of its last starts

    def add_start(self, engine: str, seconds: float) -> None:
        """One engine start's cluster time (start-up and checks), the last ``MAX_STARTS`` kept."""
        self.starts[engine] = [*self.starts.get(engine, []), round(float(seconds), 1)][-MAX_STARTS:]

    def start_seconds(self, engine: str) -> float | None:
        """The median of an engine's recorded starts (None: none recorded)."""
        times = self.starts.get(engine, [])
        return statistics.median(times) if times else None


def run_name(night: int, at: str, base: str) -> str:
    """``run 3 (2026-10-02T01:00:00Z on vllm==0.31.0)``: how reports name the run a proof is from."""
    return f"run {night} ({at} on {base})"


# --------------------------------------------------------------------------- reading


class _Check:
    """Field checks of one history file, each failure an InputError naming the file and the field."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, what: str) -> InputError:
        return InputError(
            f"{shown_path(self.path)}: {where}: {what}",
            hint="delete it: the next run proves every patch afresh and writes a new one",
        )

    def text(self, where: str, value: object, *, empty: bool = True) -> str:
        if not isinstance(value, str) or len(value) > MAX_TEXT or (not empty and not value):
            raise self.fail(where, "not a string of at most 4096 characters")
        return value

    def count(self, where: str, value: object) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 10**9:
            raise self.fail(where, "not a count")
        return value

    def table(self, where: str, value: object, limit: int) -> dict[str, Any]:
        if not isinstance(value, dict) or len(value) > limit:
            raise self.fail(where, f"not a table of at most {limit} entries")
        for k in value:
            self.text(f"{where} key", k, empty=False)
        return value

    def fields(self, where: str, value: object, known: set[str], required: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, "not a table")
        unknown = sorted(set(value) - known)
        if unknown:
            raise self.fail(where, f"unknown field {unknown[0]!r}")
        missing = sorted(required - set(value))
        if missing:
            raise self.fail(where, f"no {missing[0]}")
        return value

    def klass(self, where: str, value: object) -> str:
        if value not in CLASSES:
            raise self.fail(where, f"not a class ({', '.join(CLASSES)})")
        return str(value)

    def test(self, where: str, value: object) -> WithoutProof:
        d = self.fields(where, value, {"spec", "outcome", "reason", "checks"}, {"spec", "outcome"})
        if d["outcome"] not in (PASS, FAIL):
            raise self.fail(where, "outcome is not pass or fail")
        checks = d.get("checks", [])
        if not isinstance(checks, list) or len(checks) > 64:
            raise self.fail(where, "checks is not a list of at most 64")
        clean = []
        for i, c in enumerate(checks):
            c = self.fields(f"{where} check {i}", c, {"check", "ok", "failed_cases"}, {"check", "ok"})
            cases = c.get("failed_cases", [])
            if not isinstance(c["ok"], bool) or not isinstance(cases, list) or len(cases) > 64:
                raise self.fail(f"{where} check {i}", "not a check verdict")
            clean.append(
                {
                    "check": self.text(f"{where} check {i}", c["check"]),
                    "ok": c["ok"],
                    "failed_cases": [self.text(f"{where} check {i} case", x) for x in cases],
                }
            )
        return WithoutProof(
            self.text(f"{where} spec", d["spec"], empty=False),
            d["outcome"],
            self.text(f"{where} reason", d.get("reason", "")),
            clean,
        )

    def proof(self, where: str, value: object) -> PatchProof:
        known = {"night", "at", "base", "klass", "body", "tests", "watch", "why", "with_tests"}
        d = self.fields(where, value, known, {"night", "at", "base", "klass", "body"})
        tests = self.table(f"{where} tests", d.get("tests", {}), MAX_TESTS)
        with_tests = self.table(f"{where} with_tests", d.get("with_tests", {}), MAX_TESTS)
        watch = self.table(f"{where} watch", d.get("watch", {}), MAX_WATCH)
        why = self.table(f"{where} why", d.get("why", {}), MAX_WATCH)
        for path, digests in watch.items():
            if not (isinstance(digests, list) and len(digests) == 3 and all(_is_digest(x) for x in digests)):
                raise self.fail(f"{where} watch {path!r}", "not three digests")
        body = self.text(f"{where} body", d["body"])
        if not _is_digest(body):
            raise self.fail(f"{where} body", "not a digest")
        return PatchProof(
            self.count(f"{where} night", d["night"]),
            self.text(f"{where} at", d["at"]),
            self.text(f"{where} base", d["base"]),
            self.klass(f"{where} klass", d["klass"]),
            body,
            {name: self.test(f"{where} test {name!r}", t) for name, t in tests.items()},
            {path: list(digests) for path, digests in watch.items()},
            {path: self.text(f"{where} why", w) for path, w in why.items()},
            {name: self.test(f"{where} with-series test {name!r}", t) for name, t in with_tests.items()},
        )

    def last(self, where: str, value: object) -> LastVerdict:
        d = self.fields(where, value, {"klass", "night", "at", "base"}, {"klass", "night", "at", "base"})
        return LastVerdict(
            self.klass(f"{where} klass", d["klass"]),
            self.count(f"{where} night", d["night"]),
            self.text(f"{where} at", d["at"]),
            self.text(f"{where} base", d["base"]),
        )

    def target(self, name: str, value: object) -> TargetHistory:
        where = f"target {name!r}"
        d = self.fields(where, value, {"nights", "proofs", "last", "starts"}, {"nights"})
        proofs = self.table(f"{where} proofs", d.get("proofs", {}), MAX_PATCHES)
        last = self.table(f"{where} last", d.get("last", {}), MAX_PATCHES)
        starts = self.table(f"{where} starts", d.get("starts", {}), MAX_PATCHES)
        return TargetHistory(
            self.count(f"{where} nights", d["nights"]),
            {pid: self.proof(f"{where} patch {pid!r}", p) for pid, p in proofs.items()},
            {pid: self.last(f"{where} last {pid!r}", v) for pid, v in last.items()},
            {name: self.seconds(f"{where} starts {name!r}", v) for name, v in starts.items()},
        )

    def seconds(self, where: str, value: object) -> list[float]:
        if (
            not isinstance(value, list)
            or len(value) > MAX_STARTS
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1e7 for x in value)
        ):
            raise self.fail(where, f"not a list of at most {MAX_STARTS} durations in seconds")
        return [float(x) for x in value]


def _is_digest(value: object) -> bool:
    return isinstance(value, str) and bool(_DIGEST.match(value))


def _names(doc: dict[str, Any]) -> list[object]:
    """What a foreign history names, for the refusal: its targets and their patches."""
    return target_names(doc, lambda t: list(t["proofs"])[:3] if isinstance(t.get("proofs"), dict) else [])


def load_history(path: Path) -> dict[str, TargetHistory]:
    """``{target: TargetHistory}``; no file is an empty history. One this installation did not seal
    is ``ForeignState`` (exit 2), a malformed one ``InputError`` (exit 2)."""
    path = Path(path)
    try:
        doc = read_sealed(path, KIND, what="a verify proof history", hint=_HINT, names=_names, max_bytes=MAX_BYTES)
    except OSError as exc:  # a read error past the open (read_sealed words the rest)
        raise InputError(f"cannot read the verify proof history {path}: {exc.strerror or exc}") from None
    if doc is None:
        return {}
    check = _Check(path)
    if doc.get("version") != VERSION:
        raise check.fail("version", f"{doc.get('version')!r}, expected {VERSION}")
    targets = check.table("targets", doc.get("targets"), 256)
    return {name: check.target(name, t) for name, t in targets.items()}


def save_history(path: Path, history: dict[str, TargetHistory]) -> None:
    """Write the history with this installation's seal, atomically (the directory is made)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"version": VERSION, "targets": {k: asdict(v) for k, v in sorted(history.items())}}
    write_sealed(path, KIND, doc)


def default_history_path(ledger_root: Path) -> Path:
    """Where ``patchset verify`` keeps its proofs: ``.patchset/verify-proofs.json`` beside the ledger."""
    return Path(ledger_root) / ".patchset" / "verify-proofs.json"
