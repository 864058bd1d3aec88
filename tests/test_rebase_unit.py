"""Units of the rebase the end-to-end tests cross without pinning: blame-line mapping and how a
multi-file patch is ranked (its worst file). The trees are in memory (``MemTree``: the ``read``,
``mode`` and ``write`` of ``patchset.rebase.replay.Tree``, over a dict); merges are real
``git merge-file`` runs."""

from __future__ import annotations

import pytest

from patchset.patchfmt.diffs import parse_patch
from patchset.rebase.classify import map_line
from patchset.rebase.replay import (
    ALREADY,
    BROKEN,
    CLEAN,
    CONFLICT,
    MERGED,
    OFFSET,
    FileReplay,
    Merger,
    Move,
    PatchReplay,
    replay_patch,
)


class MemTree:
    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = dict(files)
        self.writes: list[tuple[str, bytes | None]] = []

    def read(self, path: str) -> bytes | None:
        return self.files.get(path)

    def mode(self, path: str) -> str | None:
        return "100644" if path in self.files else None

    def write(self, path: str, data: bytes | None, mode: str | None = None) -> None:
        self.writes.append((path, data))
        if data is None:
            self.files.pop(path, None)
        else:
            self.files[path] = data


SRC = b"a\nb\nc\nX\nd\ne\n"
DST = b"a\nb\nc\nY\nZ\nd\ne\n"  # X replaced by two lines: blocks a-c (0,0,3) and d-e (4,5,2)


@pytest.mark.parametrize(
    ("line", "expected"),
    [(1, 1), (3, 3), (4, 4), (5, 6), (6, 7)],  # 3: a block's last line; 4: the changed line maps to its region's start
)
def test_map_line(line: int, expected: int) -> None:
    assert map_line(SRC, DST, line) == expected


def test_map_line_unchanged_or_unknown() -> None:
    assert map_line(None, DST, 9) == 9
    assert map_line(SRC, None, 9) == 9
    assert map_line(SRC, SRC, 4) == 4
    assert map_line(b"X\na\n", b"P\nQ\nR\na\n", 1) == 1  # before every unchanged line: the first line
    assert map_line(b"X\na\n", b"P\nQ\nR\na\n", 2) == 4


def _replay(files: dict[str, bytes], new: dict[str, bytes], diff: bytes) -> PatchReplay:
    merger = Merger()
    try:
        return replay_patch(
            parse_patch(diff), MemTree(files), MemTree(new), lambda p: Move(None), merger, ("upstream", "patch")
        )
    finally:
        merger.close()


BASE = b"".join(b"line %d\n" % i for i in range(1, 21))


def _edit(path: str, n: int) -> bytes:
    return (
        f"--- a/{path}\n+++ b/{path}\n@@ -{n},3 +{n},3 @@\n line {n}\n-line {n + 1}\n+LINE {n + 1}\n line {n + 2}\n"
    ).encode()


def test_the_worst_file_ranks_a_multi_file_patch() -> None:
    shifted = b"new 1\nnew 2\n" + BASE  # the hunk applies two lines lower: offset
    upstream_edit = BASE.replace(b"line 14\n", b"upstream 14\n")  # the context changed: only a merge carries it
    wide = (
        b"--- a/merged.txt\n+++ b/merged.txt\n@@ -8,7 +8,7 @@\n line 8\n line 9\n line 10\n-line 11\n+LINE 11\n"
        b" line 12\n line 13\n line 14\n"
    )
    diff = _edit("clean.txt", 5) + _edit("offset.txt", 5) + wide
    r = _replay(
        {"clean.txt": BASE, "offset.txt": BASE, "merged.txt": BASE},
        {"clean.txt": BASE, "offset.txt": shifted, "merged.txt": upstream_edit},
        diff,
    )
    assert [f.how for f in r.files] == [CLEAN, OFFSET, MERGED]
    assert (r.status, r.how) == ("carried", MERGED)
    r = _replay(
        {"clean.txt": BASE, "offset.txt": BASE},
        {"clean.txt": BASE, "offset.txt": shifted},
        _edit("offset.txt", 5) + _edit("clean.txt", 5),
    )
    assert (r.status, r.how) == ("carried", OFFSET)
    r = _replay({"clean.txt": BASE}, {"clean.txt": BASE}, _edit("clean.txt", 5))
    assert (r.status, r.how) == ("carried", CLEAN)


def _file(how: str, *, result: bytes | None = b"new", ours: bytes | None = b"old", **kw) -> FileReplay:
    return FileReplay("f", "f", how, result=result, ours=ours, **kw)


def test_status_and_how_of_a_patch() -> None:
    assert PatchReplay([_file(CONFLICT), _file(BROKEN)]).status == "broken"
    assert PatchReplay([_file(CLEAN), _file(CONFLICT)]).status == "conflict"
    assert PatchReplay([_file(ALREADY, result=b"x", ours=b"y"), _file(CLEAN, result=b"o", ours=b"o")]).status == "empty"
    assert PatchReplay([_file(CLEAN, result=b"o", ours=b"o", delete_path="g")]).status == "carried"
    assert PatchReplay([_file(CONFLICT), _file(OFFSET)]).how == OFFSET  # a conflict is not a carried file's rank
    assert PatchReplay([_file(ALREADY)]).how == CLEAN
    assert PatchReplay([_file(MERGED), _file(OFFSET), _file(CLEAN)]).how == MERGED


def test_apply_to_stacks_only_carried_files() -> None:
    tree = MemTree({"gone": b"x"})
    PatchReplay(
        [
            FileReplay("a", "a", CLEAN, result=b"A"),
            FileReplay("b", "b", CONFLICT, result=b"<<<"),
            FileReplay("c", "c", ALREADY, result=b"C"),
            FileReplay("d", "e", MERGED, result=b"E", delete_path="gone"),
        ]
    ).apply_to(tree)
    assert tree.writes == [("a", b"A"), ("gone", None), ("e", b"E")]


def test_a_body_that_no_longer_fits_its_base_is_broken() -> None:
    r = _replay({"f.txt": b"other\n"}, {"f.txt": BASE}, _edit("f.txt", 5))
    assert r.status == "broken" and "zero fuzz" in r.files[0].message


def test_a_file_gone_upstream_conflicts() -> None:
    r = _replay({"f.txt": BASE}, {}, _edit("f.txt", 5))
    assert (r.status, r.files[0].how) == ("conflict", CONFLICT)
    assert "deleted upstream" in r.files[0].message
