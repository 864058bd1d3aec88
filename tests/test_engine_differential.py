"""Differential test: this engine against real GNU ``patch -p1 -F0 --forward`` and ``git apply``.

hypothesis draws batches of cases (random file, random edits, random drift of the target, random
line endings, a diff made by difflib or by ``git diff --no-index`` with 0..5 context lines).
Each batch runs the real binaries once (one shell per batch, one temp dir per case) and every
case must agree with GNU patch, the reference: same bytes, same per-hunk result (offset, fuzz,
failed), same refusal, same partial output when a hunk fails.

``git apply`` is compared where its rules and GNU patch's are the same. Documented differences
(where we follow GNU patch and do not compare against git):
  1. git applies a whole file or nothing (``--reject`` aside); GNU patch applies hunk by hunk.
  2. git: a hunk whose old side starts at line 1 must match at the start of the file; GNU patch
     requires that only when the hunk has less leading than trailing context.
  3. git: a hunk must match at the end of the file only when it has *no* trailing context; GNU
     patch requires it whenever the hunk has less trailing than leading context.
  4. When a hunk's old lines occur more than once, the two search in different orders (git
     walks from the position implied by the *new* line numbers, GNU from the old ones shifted by
     the previous hunk's offset), so they can pick different places.
  5. git has no "reversed patch detected" refusal; it simply fails.
  6. ``-U0`` patches need ``--unidiff-zero`` for git (given), and git then drops rules 2 and 3.
So git is compared on every case whose target file is the diff's own old file (all three must
produce the new file), and on drifted cases only when each hunk's old lines occur exactly once
in the target, no hunk starts at line 1, and both tools agree on whether a hunk is bound to
the end of the file (rules 2-4 cannot apply).

``PATCHSET_DIFF_EXAMPLES`` sets the number of cases (default 1,200) for a long nightly run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from patchset.engine.hunks import apply_file
from patchset.patchfmt.diffs import parse_patch
from patchset.patchfmt.filepatch import split_lines
from tests.support.diffgen import unified_diff

BATCH = 40
TOTAL = int(os.environ.get("PATCHSET_DIFF_EXAMPLES", "1200"))
EXAMPLES = max(1, -(-TOTAL // BATCH))

pytestmark = pytest.mark.skipif(
    not (shutil.which("patch") and shutil.which("git")), reason="needs GNU patch and git binaries"
)

POOL = [b"a", b"b", b"c", b"", b"}", b"    return x", b"x = 1", b"def f():", b"#", b"  "]


@dataclass
class Case:
    old: bytes | None  # the diff's old side (None: file created)
    new: bytes | None  # the diff's new side (None: file deleted)
    target: bytes | None  # what the file really holds when the patch is applied
    context: int
    generator: str  # "difflib" or "git"
    drift: str
    patch: bytes = b""
    notes: list[str] = field(default_factory=list)
    fuzz: int = 0


def _join(lines: list[bytes], eols: list[bytes], final_newline: bool) -> bytes:
    if not lines:
        return b""
    out = b"".join(ln + e for ln, e in zip(lines, eols, strict=False))
    if not final_newline:
        out = out[: -len(eols[-1])]
    return out


line_st = st.one_of(
    st.sampled_from(POOL),
    st.binary(min_size=1, max_size=6).map(lambda b: b.replace(b"\n", b"n").replace(b"\r", b"r").replace(b"\0", b"0")),
    st.integers(0, 40).map(lambda i: b"line %d" % i),
)


unique_line_st = st.integers(0, 10**9).map(lambda i: b"unique %d" % i)


@st.composite
def edited(draw, lines: list[bytes], min_ops: int, max_ops: int, line_st=line_st) -> list[bytes]:
    out = list(lines)
    for _ in range(draw(st.integers(min_ops, max_ops))):
        op = draw(st.sampled_from(["ins", "del", "rep"]))
        pos = draw(st.integers(0, len(out)))
        if op == "ins" or not out:
            out[pos:pos] = draw(st.lists(line_st, min_size=1, max_size=3))
        elif op == "del":
            out[pos : pos + draw(st.integers(1, 3))] = []
        else:
            out[pos : pos + draw(st.integers(1, 2))] = draw(st.lists(line_st, min_size=1, max_size=2))
    return out


@st.composite
def case_st(draw) -> Case:
    kind = draw(st.sampled_from(["modify"] * 10 + ["create", "delete"]))
    eol = draw(st.sampled_from(["lf", "lf", "crlf", "mixed"]))

    def eols(n: int) -> list[bytes]:
        if eol == "lf":
            return [b"\n"] * n
        if eol == "crlf":
            return [b"\r\n"] * n
        return [draw(st.sampled_from([b"\n", b"\r\n"])) for _ in range(n)]

    # a third of the files have no repeated line: every hunk has one place to go, so git apply
    # and GNU patch can be compared on drifted files too (see the module docstring)
    lines_st = unique_line_st if draw(st.integers(0, 2)) == 0 else line_st
    old_lines = draw(
        st.lists(lines_st, min_size=0 if kind == "create" else 1, max_size=30, unique=lines_st is unique_line_st)
    )
    new_lines = draw(edited(old_lines, 1, 4, lines_st))
    old_nl = draw(st.sampled_from([True, True, True, False]))
    new_nl = old_nl if draw(st.booleans()) else not old_nl
    old_e = eols(len(old_lines))
    new_e = eols(len(new_lines))
    old = _join(old_lines, old_e, old_nl)
    new = _join(new_lines, new_e, new_nl)
    if kind == "modify" and old == new:
        new = new + b"extra line\n" if new.endswith(b"\n") or not new else new + b"\nextra line\n"
    if kind == "create":
        old = None
        if not new:
            new = b"created\n"
    if kind == "delete":
        new = None
        if not old:  # an empty file's deletion diff has no hunks: GNU patch calls it garbage
            old = b"deleted\n"
    drift = draw(st.sampled_from(["none", "none", "insert", "insert", "delete", "mixed", "applied", "shift", "shift"]))
    target = old
    if kind == "create":
        target = None if drift != "applied" else new
        drift = "applied" if drift == "applied" else "none"
    elif drift == "applied":
        target = new
    elif drift != "none" and old is not None:
        tl = split_lines(old)
        if drift in ("insert", "mixed"):
            for _ in range(draw(st.integers(1, 3))):
                pos = draw(st.integers(0, len(tl)))
                tl[pos:pos] = [ln + b"\n" for ln in draw(st.lists(lines_st, min_size=1, max_size=4))]
        if drift == "shift":  # lines added at the top: every hunk moves down
            tl[0:0] = [ln + b"\n" for ln in draw(st.lists(lines_st, min_size=1, max_size=5))]
        if drift in ("delete", "mixed") and tl:
            pos = draw(st.integers(0, len(tl) - 1))
            tl[pos : pos + draw(st.integers(1, 2))] = []
        if drift == "reword" and tl:  # lines changed in place: context mismatches (fuzz)
            for _ in range(draw(st.integers(1, 2))):
                pos = draw(st.integers(0, len(tl) - 1))
                tl[pos] = b"reworded %d\n" % pos
        # keep the file's final-newline state at its end (drift is inside the file)
        target = b"".join(tl)
        if old and not old.endswith(b"\n") and target.endswith(b"\n") and tl and tl[-1] == split_lines(old)[-1] + b"\n":
            target = target[:-1]
    context = draw(st.sampled_from([0, 1, 2, 3, 3, 3, 5]))
    generator = draw(st.sampled_from(["difflib", "git"]))
    return Case(old, new, target, context, generator, drift)


@st.composite
def fuzz_case_st(draw) -> Case:
    """Cases for ``--fuzz``: in-place rewording drift, more context, fuzz 1..3."""
    c = draw(case_st())
    if c.old is not None and c.new is not None and c.drift in ("none", "insert", "delete"):
        tl = split_lines(c.target or b"")
        if tl:
            for _ in range(draw(st.integers(1, 2))):
                pos = draw(st.integers(0, len(tl) - 1))
                tl[pos] = b"reworded %d\n" % pos
            c.target = b"".join(tl)
            c.drift = "reword"
    c.context = draw(st.sampled_from([1, 2, 3, 3, 4]))
    c.fuzz = draw(st.integers(1, 3))
    return c


# --------------------------------------------------------------------------- running binaries

_HUNK = re.compile(
    rb"Hunk #(\d+) (?:succeeded at -?\d+(?: with fuzz (\d+))?(?: \(offset (-?\d+) lines?\))?|(FAILED) at)"
)


def _write(path: Path, data: bytes | None) -> None:
    if data is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def _sh(script: str, cwd: Path) -> None:
    subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=300,
        env={**os.environ, "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)},
    )


def make_patches(cases: list[Case], work: Path) -> None:
    script = []
    for i, c in enumerate(cases):
        if c.generator == "difflib":
            c.patch = unified_diff(c.old, c.new, f"c{i}/f", c.context)
            continue
        _write(work / "gen" / "a" / f"c{i}" / "f", c.old)
        _write(work / "gen" / "b" / f"c{i}" / "f", c.new)
        a = f"a/c{i}/f" if c.old is not None else "/dev/null"
        b = f"b/c{i}/f" if c.new is not None else "/dev/null"
        script.append(f"git diff --no-index --no-prefix -U{c.context} {a} {b} > ../p{i}.gitdiff || test $? -eq 1")
    if script:
        (work / "gen").mkdir(exist_ok=True)
        _sh("set -e\n" + "\n".join(script), work / "gen")
    for i, c in enumerate(cases):
        if c.generator == "git":
            raw = (work / f"p{i}.gitdiff").read_bytes()
            # /dev/null sides keep their name; the other side is "a/c<i>/f" or "b/c<i>/f"
            c.patch = raw


def git_comparable(c: Case) -> bool:
    """Is git apply held to GNU patch's result on this case? (rules in the module docstring)"""
    if c.fuzz:
        return False  # git apply has no fuzz
    if c.drift == "none":
        return True
    if c.drift == "applied" or c.context == 0 or not c.target:
        return False
    fps = parse_patch(c.patch, 1)
    return apply_file(c.target, fps[0]).ok and _unique_hunks(fps, c.target)


def run_binaries(cases: list[Case], work: Path) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes] | None]]:
    """One bash for the whole batch; GNU patch on every case, git apply where compared."""
    script = []
    with_git = [git_comparable(c) for c in cases]
    for i, c in enumerate(cases):
        (work / f"p{i}.patch").write_bytes(c.patch)
        for side in ("gnu", "git") if with_git[i] else ("gnu",):
            d = work / side / f"c{i}"
            d.mkdir(parents=True)
            _write(d / f"c{i}" / "f", c.target)
        script.append(
            f"patch -d gnu/c{i} -p1 -F{c.fuzz} --forward --no-backup-if-mismatch -r - "
            f"-i ../../p{i}.patch > gnu/o{i} 2>&1; echo $? > gnu/rc{i}"
        )
        if with_git[i]:
            zero = "--unidiff-zero " if c.context == 0 else ""
            script.append(
                f"git -C git/c{i} apply --reject {zero}-p1 ../../p{i}.patch > git/o{i} 2>&1; echo $? > git/rc{i}"
            )
    (work / "gnu").mkdir(exist_ok=True)
    (work / "git").mkdir(exist_ok=True)
    _sh("\n".join(script), work)
    gnu: list[tuple[int, bytes]] = []
    git: list[tuple[int, bytes] | None] = []
    for i in range(len(cases)):
        gnu.append((int((work / "gnu" / f"rc{i}").read_text()), (work / "gnu" / f"o{i}").read_bytes()))
        git.append(
            (int((work / "git" / f"rc{i}").read_text()), (work / "git" / f"o{i}").read_bytes()) if with_git[i] else None
        )
    return gnu, git


def _unique_hunks(fps, target: bytes) -> bool:
    lines = split_lines(target)
    for fp in fps:
        for h in fp.hunks:
            pat = h.old_lines()
            body = h.body()
            lead = next((k for k, (t, _) in enumerate(body) if t != " "), len(body))
            trail = next((k for k, (t, _) in enumerate(reversed(body)) if t != " "), len(body))
            if not pat or h.old_start <= 1:  # rule 2
                return False
            if not ((trail == 0 and lead > 0) or (trail > 0 and trail >= lead)):  # rule 3
                return False
            n = sum(1 for s in range(len(lines) - len(pat) + 1) if lines[s : s + len(pat)] == pat)
            if n != 1:
                return False
    return True


def check_case(i: int, c: Case, work: Path, gnu: tuple[int, bytes], git: tuple[int, bytes] | None) -> None:
    where = f"case {i} ({c.generator} -U{c.context}, drift={c.drift})"
    detail = (
        f"\n--- target ---\n{c.target!r}\n--- patch ---\n{c.patch.decode('latin-1')}"
        f"\n--- GNU patch said (rc={gnu[0]}) ---\n{gnu[1].decode('latin-1')}"
    )
    fps = parse_patch(c.patch, 1)
    assert len(fps) == 1, where + detail
    fp = fps[0]
    outcome = apply_file(c.target, fp, fuzz=c.fuzz)
    gnu_rc, gnu_out = gnu
    gnu_file = _read(work / "gnu" / f"c{i}" / f"c{i}" / "f")
    refused = (
        b"Reversed (or previously applied) patch detected" in gnu_out
        or b"which already exists" in gnu_out
        or b"which does not exist" in gnu_out
        or b"which is already empty" in gnu_out
    )
    hunks = {int(m.group(1)): m for m in _HUNK.finditer(gnu_out)}
    if refused:
        assert outcome.status in ("already_applied", "failed") and outcome.new is None, where + detail
        if b"Reversed" in gnu_out:
            assert outcome.status == "already_applied", where + detail
        assert gnu_file == c.target, where + detail
        return
    if gnu_rc == 0:
        assert outcome.status == "applied", f"{where}: GNU applied, engine: {outcome}" + detail
        expect = None if fp.op == "delete" else outcome.new
        assert gnu_file == expect, f"{where}: bytes differ\nengine={outcome.new!r}\ngnu={gnu_file!r}" + detail
    else:
        assert gnu_rc == 1, where + detail
        assert outcome.status == "failed", f"{where}: GNU failed, engine: {outcome}" + detail
        assert outcome.partial is not None or not outcome.hunks, where + detail
        if outcome.partial is not None:
            assert gnu_file == outcome.partial, (
                f"{where}: partial differs\nengine={outcome.partial!r}\ngnu={gnu_file!r}" + detail
            )
    # per-hunk agreement (GNU prints a line for every hunk that failed or moved)
    for r in outcome.hunks:
        m = hunks.get(r.index)
        if r.status == "failed":
            assert m is not None and m.group(4), f"{where}: hunk {r.index} failed only here" + detail
        elif m is None:
            assert r.offset == 0 and r.fuzz == 0, f"{where}: hunk {r.index}: {r}" + detail
        else:
            assert not m.group(4), f"{where}: hunk {r.index} failed only in GNU" + detail
            assert int(m.group(3) or 0) == r.offset, f"{where}: hunk {r.index} offset {r}" + detail
            assert int(m.group(2) or 0) == r.fuzz, where + detail
    assert set(hunks) <= {r.index for r in outcome.hunks}, where + detail
    # git apply, where its rules match GNU patch's (see module docstring)
    if git is None:
        return
    git_rc, git_out = git
    git_file = _read(work / "git" / f"c{i}" / f"c{i}" / "f")
    assert git_rc == 0, f"{where}: git apply failed: {git_out!r}" + detail
    if c.drift == "none":
        assert git_file == c.new == (None if fp.op == "delete" else outcome.new), where + detail
    else:
        c.notes.append("git compared")
        assert git_file == outcome.new, f"{where}: git apply differs:\ngit={git_file!r}" + detail


# No shrink phase: a failure message already names the one failing case with its file, patch
# and GNU patch's output, and shrinking a 40-case batch takes minutes.
SETTINGS = {
    "deadline": None,
    "phases": [Phase.explicit, Phase.reuse, Phase.generate],
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


def test_engine_matches_gnu_patch_and_git_apply(tmp_path_factory) -> None:
    """Every generated case gives GNU patch's bytes and outcome (and git apply's, where its rules
    match); then the run itself must have been broad: >= 1,000 cases and every kind of outcome,
    so agreement is not agreement on trivial cases only."""
    stats = {
        "cases": 0,
        "git_compared": 0,
        "git_compared_drifted": 0,
        "applied": 0,
        "failed": 0,
        "refused": 0,
        "offset": 0,
    }

    @settings(max_examples=EXAMPLES, **SETTINGS)
    @given(st.lists(case_st(), min_size=BATCH, max_size=BATCH))
    def agree(cases: list[Case]) -> None:
        work = tmp_path_factory.mktemp("diff")
        make_patches(cases, work)
        gnu, git = run_binaries(cases, work)
        for i, c in enumerate(cases):
            check_case(i, c, work, gnu[i], git[i])
            stats["cases"] += 1
            stats["git_compared"] += git[i] is not None
            stats["git_compared_drifted"] += bool(c.notes)
            st_ = apply_file(c.target, parse_patch(c.patch)[0]).status
            stats["applied" if st_ == "applied" else "refused" if st_ == "already_applied" else "failed"] += 1
            stats["offset"] += b"offset" in gnu[i][1]
        shutil.rmtree(work, ignore_errors=True)

    agree()
    print(stats)
    assert stats["cases"] >= min(TOTAL, 1000)
    assert stats["applied"] > 0 and stats["failed"] > 0 and stats["refused"] > 0
    assert stats["offset"] > 0 and stats["git_compared_drifted"] > 0


FUZZ_TOTAL = max(BATCH, TOTAL // 4)


def test_fuzz_matches_gnu_patch(tmp_path_factory) -> None:
    """``--fuzz N`` (only when asked) against ``patch -FN``: same hunks fuzzed, same bytes; and some
    cases really needed fuzz."""
    stats = {"cases": 0, "fuzzed": 0}

    @settings(max_examples=max(1, FUZZ_TOTAL // BATCH), **SETTINGS)
    @given(st.lists(fuzz_case_st(), min_size=BATCH, max_size=BATCH))
    def agree(cases: list[Case]) -> None:
        work = tmp_path_factory.mktemp("fuzz")
        make_patches(cases, work)
        gnu, git = run_binaries(cases, work)
        for i, c in enumerate(cases):
            check_case(i, c, work, gnu[i], git[i])
            stats["cases"] += 1
            stats["fuzzed"] += b"with fuzz" in gnu[i][1]
        shutil.rmtree(work, ignore_errors=True)

    agree()
    print(stats)
    assert stats["cases"] >= max(1, FUZZ_TOTAL // BATCH) * BATCH and stats["fuzzed"] > 0


# --------------------------------------------------------------------------- real vLLM source


@pytest.mark.network
@pytest.mark.parametrize("version", ["0.30.0", "0.31.0"])
def test_real_vllm_series_matches_gnu_patch(tmp_path: Path, version: str) -> None:
    """bench/apply.py's 20-patch series (written against vLLM 0.30.0) applied patch by patch
    to the real 0.30.0 source (clean) and to 0.31.0 (real upstream drift: offsets, failures):
    every file of every patch gets GNU patch's result, bytes and hunk statuses included."""
    import importlib.util

    from patchset.upstream.releases import probe_index

    problem = probe_index()
    if problem:
        pytest.skip(f"package index unreachable: {problem}")
    spec = importlib.util.spec_from_file_location(
        "bench_apply", Path(__file__).resolve().parent.parent / "bench" / "apply.py"
    )
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    src, target = bench.vllm_tree("0.30.0"), bench.vllm_tree(version)
    series_dir = tmp_path / "series"
    series_dir.mkdir()
    patches = bench.write_series(src, series_dir)
    gnu_tree = tmp_path / "gnu"
    seen = {"clean": 0, "offset": 0, "failed": 0, "files": 0}
    for p in patches:
        for fp in parse_patch(p.read_bytes()):
            rel = fp.path
            if not (gnu_tree / rel).exists() and (target / rel).exists():
                (gnu_tree / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(target / rel, gnu_tree / rel)
    for p in patches:
        fps = parse_patch(p.read_bytes())
        before = {fp.path: _read(gnu_tree / fp.path) for fp in fps}
        proc = subprocess.run(
            ["patch", "-p1", "-F0", "--forward", "--no-backup-if-mismatch", "-r", "-", "-i", str(p)],
            cwd=gnu_tree,
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )
        said = proc.stdout
        sections = re.split(rb"(?m)^patching file ", said)[1:]
        assert len(sections) == len(fps), said
        for fp, text in zip(fps, sections, strict=False):
            assert text.startswith(fp.path.encode()), (text, fp.path)
            out = apply_file(before[fp.path], fp)
            hunks = {int(m.group(1)): m for m in _HUNK.finditer(text)}
            seen["files"] += 1
            for r in out.hunks:
                m = hunks.get(r.index)
                if r.status == "failed":
                    assert m is not None and m.group(4), (p.name, r, text)
                    seen["failed"] += 1
                else:
                    assert (int(m.group(3) or 0) if m else 0) == r.offset, (p.name, r, text)
                    assert m is None or not m.group(4), (p.name, r, text)
                    seen["offset" if r.offset else "clean"] += 1
            now = _read(gnu_tree / fp.path)
            assert (out.new if out.ok else out.partial) == now, (p.name, fp.path, out.message)
    if version == "0.30.0":
        assert seen["failed"] == 0 and seen["offset"] == 0 and seen["clean"] >= 20
    else:
        assert seen["offset"] > 0  # the real drift moved hunks
    print(version, seen)
