"""Memory that grows with the input, not with an object per line (issue #16, item 13).

Peaks are measured with ``tracemalloc`` (every Python allocation: ``bytes``, lists, arrays,
objects) around one call, against bounds relative to the input's size; speed is
``bench/scale.py``'s job, not a test's. Before the streaming reader the parser held ~10x a
body's size (unidiff: an object and a ``str`` per line) and the engine split the file into one
``bytes`` per line and kept a ``HunkResult`` object per hunk.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from patchset.commands import inspection
from patchset.engine.hunks import apply_file, reverse_file_patch
from patchset.errors import PatchFormatError
from patchset.ledger.store import load_ledger
from patchset.patchfmt.diffs import parse_patch
from patchset.patchfmt.filepatch import HunkList
from tests.support.diffgen import unified_diff
from tests.support.unidiff_reference import parse_patch as reference_parse

MB = 1 << 20


def _line(i: int, changed: bool = False) -> bytes:
    return b"x" * 60 + (b" %09dY\n" % i if changed else b" %09d\n" % i)


def big_case(mb: float) -> tuple[bytes, bytes, bytes]:
    """(old file, new file, patch) of about ``mb`` MB of patch: every 4th line changed, one line
    of context (the shape of bench/scale.py; checked against ``diffgen`` below)."""
    n = int(mb * MB) // 80 // 4 * 4
    old = b"".join(_line(i) for i in range(n))
    new = b"".join(_line(i, i % 4 == 0) for i in range(n))
    out = [b"--- a/big.txt\n+++ b/big.txt\n"]
    for i in range(0, n, 4):
        lo, hi = max(i - 1, 0), min(i + 2, n)
        out.append(b"@@ -%d,%d +%d,%d @@\n" % (lo + 1, hi - lo, lo + 1, hi - lo))
        for k in range(lo, hi):
            out.append(b"-" + _line(k) + b"+" + _line(k, True) if k == i else b" " + _line(k))
    return old, new, b"".join(out)


def test_the_big_case_is_a_real_diff() -> None:
    old, new, body = big_case(0.01)
    assert body == unified_diff(old, new, "big.txt", context=1)


def peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    """(result, peak bytes allocated while ``fn`` ran, above what was allocated before)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = fn()
        return result, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _parse_peak(mb: float) -> None:
    _, _, body = big_case(mb)
    fps, used = peak(lambda: parse_patch(body))
    # a few integers per hunk (a hunk here is ~300 bytes of body), nothing per line
    assert used < 0.15 * len(body) + 256 * 1024, f"parsing a {len(body)} byte body held {used} bytes"
    assert isinstance(fps[0].hunks, HunkList) and len(fps[0].hunks) == body.count(b"\n@@ ")


def _apply_peak(mb: float) -> None:
    old, new, body = big_case(mb)
    fp = parse_patch(body)[0]
    out, used = peak(lambda: apply_file(old, fp))
    assert out.ok and out.new == new
    # the new file, an offset per line of the old one, a few bytes per hunk result
    assert used < 1.35 * len(new) + 256 * 1024, f"applying to a {len(old)} byte file held {used} bytes"
    assert len(out.hunks) == len(fp.hunks) and out.hunks[-1].status == "clean"


def test_parsing_keeps_no_object_per_line() -> None:
    _parse_peak(1.5)


def test_applying_keeps_no_object_per_line() -> None:
    _apply_peak(1.5)


@pytest.mark.slow
def test_parsing_and_applying_8_mb_stay_near_the_input_size() -> None:
    _parse_peak(8)
    _apply_peak(8)


def test_the_reference_parser_does_keep_an_object_per_line() -> None:
    """The probe can fail: unidiff's parse of the same body is far above the bound."""
    _, _, body = big_case(0.3)
    _, used = peak(lambda: reference_parse(body))
    assert used > 2 * len(body)


def test_lazy_hunks_reverse_like_the_reference() -> None:
    old, new, body = big_case(0.02)
    fp = parse_patch(body)[0]
    ref = reference_parse(body)[0]
    rev, ref_rev = reverse_file_patch(fp), reverse_file_patch(ref)
    assert isinstance(rev.hunks, HunkList) and rev.hunks == ref_rev.hunks
    assert rev.line_counts() == ref_rev.line_counts() == (ref.line_counts()[1], ref.line_counts()[0])
    back = apply_file(new, rev)
    assert back.ok and back.new == old


def test_output_bound_holds_for_markers_and_crlf() -> None:
    """The engine sizes its output buffer from the patch; a wrong bound must still give the
    right bytes (the buffer grows), and the bound is a real upper bound on these shapes."""
    from patchset.engine.hunks import output_bound

    cases = [
        (b"a\r\nb\r\nc", b"a\r\nB\r\nc\r\nd"),
        (b"a\nb\nc\n", b"a\nc"),
        (b"", b"x\ny"),
        (b"x\ny", b""),
    ]
    for old, new in cases:
        for body in (unified_diff(old, new, "f"), unified_diff(old, new, "f").replace(b"\n", b"\r\n")):
            fp = parse_patch(body)[0]
            out = apply_file(old if fp.op != "create" else None, fp)
            if out.ok and out.new is not None:
                assert len(out.new) <= output_bound(len(old), fp.hunks), (old, new, body)


def test_absurdly_long_hunk_numbers_are_a_located_error_not_a_crash() -> None:
    """Python refuses to turn 4,300+ digits into an int: unidiff let that ValueError escape."""
    body = b"--- a/f\n+++ b/f\n@@ -" + b"9" * 5000 + b",1 +1 @@\n-a\n+b\n"
    with pytest.raises(ValueError):
        reference_parse(body)
    with pytest.raises(PatchFormatError) as exc:
        parse_patch(body, source="p.patch")
    assert "p.patch:3" in exc.value.render() and "too large" in exc.value.render()


# --------------------------------------------------------------------------- ledgers

LEDGER_HEAD = 'schema = 1\n[targets.t]\nupstream = "https://example.invalid/t.git"\n'


def _ledger(root: Path, n: int) -> Path:
    series = root / "patchset" / "series" / "t"
    series.mkdir(parents=True)
    toml = [LEDGER_HEAD]
    for i in range(n):
        pid = f"p{i:04d}"
        (series / f"{pid}.patch").write_bytes(b"--- a/f%d\n+++ b/f%d\n@@ -1 +1 @@\n-a\n+b\n" % (i, i))
        toml.append(f'\n[[patch]]\nid = "{pid}"\ntarget = "t"\ntitle = "t{i}"\norigin = "ours"\n')
    (root / "patches.toml").write_text("".join(toml))
    return root / "patches.toml"


def test_validate_does_not_resolve_every_body(tmp_path: Path, monkeypatch) -> None:
    """validate compared each body file with ``realpath`` (two walks of every path component per
    patch) and built a set of every patch id once per lock entry: 10,000 patches took ~30 s."""
    led = load_ledger(_ledger(tmp_path, 200))
    calls = {"resolve": 0}
    real = Path.resolve

    def counting(self: Path, strict: bool = False) -> Path:
        calls["resolve"] += 1
        return real(self, strict)

    monkeypatch.setattr(Path, "resolve", counting)
    rep = inspection.validate(led)
    assert [p for p in rep.problems if "the lock is missing" not in p] == []  # the ledger has no lock yet
    assert not [w for w in rep.warnings if "extra body" in w]
    assert calls["resolve"] < 10


def test_validate_still_finds_extra_bodies_and_sees_through_symlinks(tmp_path: Path) -> None:
    path = _ledger(tmp_path, 3)
    series = tmp_path / "patchset" / "series"
    (series / "t" / "stray.patch").write_bytes(b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    (series / "u").mkdir()
    (series / "u" / "same.patch").symlink_to(series / "t" / "p0001.patch")  # the same body by another name
    rep = inspection.validate(load_ledger(path))
    extra = sorted(w for w in rep.warnings if "extra body" in w)
    assert extra == ["extra body not in the ledger: patchset/series/t/stray.patch"]


@pytest.mark.parametrize("command", ["list", "validate", "show"])
def test_reading_bodies_never_imports_unidiff(command: str) -> None:
    """unidiff is the tests' reference now: ``list``/``validate``/``show`` parse every body (for
    their file lists and diffstats) without loading it (they did, through ``diffs``, before)."""
    import subprocess
    import sys

    from tests.support.repo import REPO_ROOT

    args = [command] + (["01-pdl-sm12x"] if command == "show" else [])
    probe = (
        "import sys\nsys.argv = ['patchset', *sys.argv[1:]]\nfrom patchset.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\nprint('UNIDIFF', 'unidiff' in sys.modules, file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-P", "-c", probe, *args], cwd=REPO_ROOT, capture_output=True, text=True)
    assert "UNIDIFF False" in r.stderr, r.stderr[-2000:]
