"""The streaming diff reader (``patchset.patchfmt.reader``) against unidiff, on patches no one here wrote.

The product reads bodies with its own streaming reader (unidiff keeps one object per line and
cannot hand out one hunk at a time: a 100 MB body cost ~1.1 GB). unidiff stays the reference:
``tests/support/unidiff_reference.py`` is the parser as it was, unidiff underneath, and every body
here must give the same file patches, hunk by hunk and byte by byte, or the same located error.

Material: the Debian corpus (real quilt series of ten packages, ``tests/support/debian.py``; the
two small packages in the default run, all ten with ``-m corpus``), the example and production
series of this repository, vLLM-shaped diffs generated from real-looking Python sources, and
every prefix of a few real patches (truncated bodies exercise every error path of the grammar).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from patchset.errors import PatchFormatError
from patchset.patchfmt.diffs import parse_patch
from patchset.patchfmt.filepatch import FilePatch, HunkList
from tests.support import debian
from tests.support.diffgen import unified_diff
from tests.support.repo import REPO_ROOT
from tests.support.unidiff_reference import parse_patch as reference_parse


def _outcome(parse, body: bytes, strip: int) -> tuple[str, object]:
    try:
        return "ok", parse(body, strip, source="p.patch")
    except PatchFormatError as exc:
        return "error", exc.render()


def _fields(fp: FilePatch) -> tuple:
    return (
        fp.old_path,
        fp.new_path,
        fp.op,
        fp.old_mode,
        fp.new_mode,
        fp.binary,
        fp.similarity,
        fp.git,
        fp.line_no,
        [(h.old_start, h.old_len, h.new_start, h.new_len, h.lines, h.section, h.line_no) for h in fp.hunks],
    )


def assert_same(body: bytes, strip: int = 1, what: str = "") -> str:
    """The reader and unidiff agree on ``body``; returns ``ok`` or ``error``."""
    kind, got = _outcome(parse_patch, body, strip)
    ref_kind, want = _outcome(reference_parse, body, strip)
    assert kind == ref_kind, (what, got, want)
    if kind == "error":
        assert got == want, what
        return kind
    assert isinstance(got, list) and isinstance(want, list)
    assert len(got) == len(want), what
    for a, b in zip(got, want, strict=True):
        assert _fields(a) == _fields(b), (what, a.path)
        assert a.line_counts() == b.line_counts(), (what, a.path)
        assert isinstance(a.hunks, HunkList)
        assert a.hunks == b.hunks  # the lazy list compares equal to a plain one
    return kind


def _bodies(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".patch", ".diff"))


def _debian_patches(pkg: str) -> list[Path]:
    missing = debian.tools_missing()
    if missing:
        pytest.skip(f"Debian corpus: {missing}")
    try:
        src = debian.extract(pkg, "bookworm")
    except debian.Unavailable as exc:
        pytest.skip(f"Debian corpus: {exc}")
    return [src.patches / name for name in src.series if (src.patches / name).is_file()]


def _check_package(pkg: str) -> None:
    paths = _debian_patches(pkg)
    assert paths
    kinds = {}
    for path in paths:
        body = path.read_bytes()
        for strip in (1, 0):
            kinds[(path.name, strip)] = assert_same(body, strip, f"{pkg}/{path.name} -p{strip}")
    assert any(k == "ok" for k in kinds.values())


@pytest.mark.corpus  # and in the default run: the CI tier
@pytest.mark.parametrize("pkg", debian.SMALL)
def test_reader_agrees_with_unidiff_on_a_debian_series(pkg: str) -> None:
    _check_package(pkg)


@pytest.mark.corpus
@pytest.mark.slow
@pytest.mark.parametrize("pkg", [p for p in debian.PACKAGES if p not in debian.SMALL])
def test_reader_agrees_with_unidiff_on_every_debian_series(pkg: str) -> None:
    _check_package(pkg)


def test_reader_agrees_with_unidiff_on_this_repositorys_series() -> None:
    paths = _bodies(REPO_ROOT / "examples") + _bodies(REPO_ROOT / "patchset" / "series")
    assert len(paths) >= 10
    for path in paths:
        assert assert_same(path.read_bytes(), 1, str(path)) == "ok"


def test_reader_agrees_with_unidiff_on_every_prefix_of_real_patches() -> None:
    """Truncated bodies (every line count) reach every error of the grammar: shorter hunks, a
    marker with no hunk, a target without a source ..."""
    paths = _bodies(REPO_ROOT / "examples")[:4]
    seen = set()
    for path in paths:
        lines = path.read_bytes().splitlines(keepends=True)
        for n in range(1, len(lines) + 1):
            seen.add(assert_same(b"".join(lines[:n]), 1, f"{path.name}[:{n}]"))
            seen.add(assert_same(b"".join(lines[:n])[:-1], 1, f"{path.name}[:{n}] without its last newline"))
    assert seen == {"ok", "error"}


def _python_source(rng: random.Random, n: int) -> bytes:
    out = [b'"""Module docstring."""\n', b"from __future__ import annotations\n", b"\n"]
    for i in range(n):
        kind = rng.random()
        if kind < 0.1:
            out.append(b"\n")
        elif kind < 0.2:
            out.append(b"def f%d(x: int) -> int:\n" % i)
        elif kind < 0.25:
            out.append(b"    return x  # no newline at end\r\n")
        else:
            out.append(b"    value_%d = compute(%d)  # \xc3\xa9\n" % (i, rng.randrange(100)))
    if rng.random() < 0.5:
        out[-1] = out[-1].rstrip(b"\n")
    return b"".join(out)


@pytest.mark.parametrize("seed", range(6))
def test_reader_agrees_with_unidiff_on_vllm_shaped_diffs(seed: int) -> None:
    """Multi-file diffs shaped like the vLLM series: edits, new and deleted files, blank and CRLF
    lines, non-UTF-8 bytes, files without a final newline, several context sizes."""
    rng = random.Random(seed)
    body = []
    for k in range(5):
        old = _python_source(rng, rng.randrange(5, 80))
        lines = old.splitlines(keepends=True)
        for _ in range(rng.randrange(1, 6)):
            i = rng.randrange(len(lines))
            lines[i] = rng.choice([b"", b"    patched()\n", lines[i] + b"    added()\n", b"\n"])
        new = b"".join(lines)
        name = f"vllm/v1/attention/backends/mla/mod_{k}.py"
        choice = rng.random()
        if choice < 0.15:
            body.append(unified_diff(None, new, name, context=rng.choice([0, 1, 3])))
        elif choice < 0.25:
            body.append(unified_diff(old, None, name, context=3))
        else:
            body.append(unified_diff(old, new, name, context=rng.choice([0, 1, 3, 5])))
    assert assert_same(b"".join(body)) == "ok"


@pytest.mark.parametrize(
    "body",
    [
        b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n",
        b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-b\n+c\n\n\n\\ No newline at end of file\n\\ No newline at end of file\n",
        b"--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n",  # a blank line inside a hunk: context
        b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n\r\r\n-b\n+c\n",  # a line of CRs
        b"--- a/x\r\n+++ b/x\r\n@@ -1,2 +1,2 @@\r\n a\r\n-b\r\n+c\r\n",  # CRLF headers: CRs stripped
        b"--- a/x\n+++ b/x\n@@ -0,0 +0,0 @@\n",
        b"--- a/x\n+++ b/x\n@@ -0,0 +0,0 @@\n\\ No newline at end of file\n",
        b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n\\ Kein Zeilenumbruch am Dateiende.\n",
        b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n",
        b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n",
        b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n?b\n",
        b"+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
        b"\\ No newline at end of file\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
        b"diff --git a/x b/x\n\\ No newline at end of file\n",
        b"diff --git a/x b/y\nsimilarity index 90%\nrename from x\nrename to y\n\ndiff --git a/z b/z\nnew file mode 100755\n"
        b"--- /dev/null\n+++ b/z\n@@ -0,0 +1 @@\n+z\n",
        b"diff --git a/x b/x\nold mode 100644\nnew mode 100755\ndiff --git a/l b/l\nindex 1..2 120000\n"
        b"--- a/l\n+++ b/l\n@@ -1 +1 @@\n-t\n\\ No newline at end of file\n+u\n\\ No newline at end of file\n",
        b"diff --git a/b.bin b/b.bin\nindex 1..2 100644\nGIT binary patch\nliteral 3\nKcmZ?wQ~&?~00IC2\n\n",
        b"Binary files a/b.bin and b/b.bin differ\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
        b"new file mode 100644\n",
        b"--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n--- a/x\n+++ b/x\n@@ -99999999999999999999,1 +1 @@\n-a\n+b\n",
        b"--- a/x\n+++ b/x\n@@ -1 +1 @@ def f():\r\n-a\n+b",
        b"From: Someone <a@b.c>\nSubject: [PATCH] x\n\n---\n x | 2 +-\n\ndiff --git a/x b/x\n--- a/x\n+++ b/x\n"
        b"@@ -1 +1 @@\n-a\n+b\n-- \n2.40.0\n",
    ],
)
def test_reader_agrees_with_unidiff_on_edge_cases(body: bytes) -> None:
    assert_same(body)
    assert_same(body, 0)


_HEADERISH = [
    b"diff --git a/x b/x\n",
    b"--- a/x\n",
    b"+++ b/x\n",
    b"@@ -1,3 +1,3 @@\n",
    b"@@ -0,0 +1 @@ section\n",
    b"\\ No newline at end of file\n",
    b"new file mode 100644\n",
    b"deleted file mode 100755\n",
    b"index 0123abc..4567def 100644\n",
    b"old mode 100644\n",
    b"rename from x\n",
    b"Binary files a/x and b/x differ\n",
    b"GIT binary patch\n",
    b"\n",
    b"\r\n",
    b" context\n",
    b"-removed\n",
    b"+added\n",
]


def _mutate(body: bytes, rng: random.Random) -> bytes:
    lines = body.splitlines(keepends=True)
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(len(lines) + 1)
        op = rng.randrange(6)
        if op == 0 and lines:
            del lines[min(i, len(lines) - 1)]
        elif op == 1:
            lines.insert(i, rng.choice(_HEADERISH))
        elif op == 2 and lines:
            j = min(i, len(lines) - 1)
            lines.insert(j, lines[j])
        elif op == 3 and lines:
            j = min(i, len(lines) - 1)
            b = bytearray(lines[j])
            b[rng.randrange(len(b))] = rng.choice(b" -+\\@\r\n\x00\xff")
            lines[j] = bytes(b)
        elif op == 4 and lines:
            j = min(i, len(lines) - 1)
            lines[j] = lines[j].replace(b"\n", b"\r\n")
        else:
            lines = lines[:i]
    return b"".join(lines)


def test_reader_agrees_with_unidiff_on_mutated_real_patches() -> None:
    """Hostile variants of real patches (lines dropped, doubled, damaged, header lines dropped in):
    the same file patches or the same located error, every time."""
    rng = random.Random(1316)
    paths = _bodies(REPO_ROOT / "examples")
    kinds = {"ok": 0, "error": 0}
    for k in range(400):
        bad = _mutate(rng.choice(paths).read_bytes(), rng)
        try:
            kind = assert_same(bad, rng.choice([0, 1]), f"mutation {k}")
        except ValueError:  # the reference's own crash on absurd numbers (test_scale covers it)
            continue
        kinds[kind] += 1
    assert kinds["ok"] > 50 and kinds["error"] > 50, kinds
