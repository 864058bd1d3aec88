"""Real-world patch formats, as other people write them: ``diff -ruN`` new files, GNU patch's file
name rule, data-less binary stanzas, NUL bytes in text, quilt sub-directories and ``-p0``, DEP-3
headers, ``patch -E``, quilt-style bodies through a rebase, and "already upstream in another form".

Every fixture is small and written here, in the exact format the tools that produce it use
(GNU diff's ``diff -ruN`` timestamps, git's binary stanza, quilt's series file, DEP-3 headers as
Debian writes them). Where GNU patch is installed, the result is compared with a real GNU patch run.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from patchset.engine.hunks import apply_file
from patchset.engine.results import SeriesItem
from patchset.engine.tree import apply_series
from patchset.ledger.store import load_ledger
from patchset.patchfmt.diffs import parse_patch
from patchset.patchfmt.headers import parse_meta
from patchset.patchfmt.names import is_epoch
from patchset.rebase.session import RebaseRun, rebase
from tests.support.repo import commit_files, git, new_repo, release_history, tree_digest

needs_gnu = pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")


def gnu_patch(tree: Path, body: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["patch", "-s", "-t", "-F0", "-N", "-p1", *args], cwd=tree, input=body, capture_output=True)


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


# ============================================================================ diff -ruN new files

NEW = b"@@ -0,0 +1,2 @@\n+new\n+file\n"


@pytest.mark.parametrize(
    "old_line",
    [
        b"--- a/x.py\t1970-01-01 00:00:00.000000000 +0000\n",  # GNU diff -ruN, UTC
        b"--- a/x.py\t1969-12-31 19:00:00.000000000 -0500\n",  # the same instant in New York
        b"--- a/x.py\t1969-12-31 19:00:00\n",  # local time, no zone (GNU patch: any -25..+26 h offset)
        b"--- a/x.py 1970-01-01 00:00:00 +0000\n",  # space-separated (name ends at the first blank)
        b"--- a/x.py\tThu Jan  1 00:00:00 1970\n",  # ctime form
    ],
)
def test_diff_ruN_epoch_forms_are_creations(old_line: bytes) -> None:
    fp = parse_patch(old_line + b"+++ b/x.py\t2026-01-01 10:00:00.000000000 +0000\n" + NEW)[0]
    assert (fp.op, fp.old_path, fp.new_path) == ("create", None, "x.py")


def test_epoch_is_a_creation_only_where_the_hunks_agree() -> None:
    # GNU patch 2.7.6 patches an existing y.py here (verified): the Epoch alone does not make a creation
    body = b"--- a/y.py\t1969-12-31 19:00:00\n+++ b/y.py\t2026-01-01 00:00:00\n@@ -1 +1 @@\n-a\n+b\n"
    assert parse_patch(body)[0].op == "modify"
    assert not is_epoch("1970-01-01 00:30:00 +0000") and not is_epoch("1971-01-01 00:00:00")
    assert is_epoch("1970-01-01 01:00:00 +0100") and not is_epoch("1970-01-01 01:00:00 +0000")


# ============================================================================ GNU patch's name rule


SPACE_NOTAB = b"--- /dev/null\n+++ b/Misc/NEWS.d/next/Core and Builtins/x.rst\n@@ -0,0 +1,2 @@\n+Fix a crash.\n+More.\n"
SPACE_TAB = (
    b"--- /dev/null\t1970-01-01 00:00:00\n"
    b"+++ b/Misc/NEWS.d/next/Core and Builtins/x.rst\t2026-01-01 00:00:00\n@@ -0,0 +1 @@\n+Fix.\n"
)


def test_name_with_spaces_follows_gnu_patch() -> None:
    # without a tab the name ends at the first blank (what Debian's python3.11 tree really holds:
    # Misc/NEWS.d/next/Core); with a tab before the timestamp the spaces belong to the name
    assert parse_patch(SPACE_NOTAB)[0].new_path == "Misc/NEWS.d/next/Core"
    assert parse_patch(SPACE_TAB)[0].new_path == "Misc/NEWS.d/next/Core and Builtins/x.rst"
    git_style = b"diff --git a/d e/x b/d e/x\nnew file mode 100644\n--- /dev/null\n+++ b/d e/x\n@@ -0,0 +1 @@\n+x\n"
    assert parse_patch(git_style)[0].new_path == "d e/x"  # git diffs name the file whole


@needs_gnu
@pytest.mark.parametrize("body", [SPACE_NOTAB, SPACE_TAB], ids=["no-tab", "tab"])
def test_name_rule_matches_a_real_gnu_patch_run(tmp_path: Path, body: bytes) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "gnu"
    ours.mkdir()
    theirs.mkdir()
    assert gnu_patch(theirs, body).returncode == 0
    assert apply_series(ours, [SeriesItem("p", body)]).ok
    assert tree_digest(ours) == tree_digest(theirs) and tree_digest(ours)


# ============================================================================ data-less binary stanzas (glibc)

GLIBC_LIKE = (
    b"GIT update of https://example.invalid/glibc.git from glibc-2.36\n\n"
    b"diff --git a/timezone/testdata/XT6 b/timezone/testdata/XT6\nnew file mode 100644\n"
    b"index 0000000000..07b393bb7d\nBinary files /dev/null and b/timezone/testdata/XT6 differ\n"
    b"diff --git a/y.c b/y.c\nindex 1111111111..2222222222 100644\n--- a/y.c\n+++ b/y.c\n@@ -1 +1 @@\n-a\n+b\n"
)


@needs_gnu
@pytest.mark.parametrize("remove_empty", [False, True], ids=["plain", "-E"])
def test_dataless_binary_stanza_is_passed_over_like_gnu_patch(tmp_path: Path, remove_empty: bool) -> None:
    ours = write_tree(tmp_path / "ours", {"y.c": b"a\n"})
    theirs = write_tree(tmp_path / "gnu", {"y.c": b"a\n"})
    assert gnu_patch(theirs, GLIBC_LIKE, *(["-E"] if remove_empty else [])).returncode == 0
    res = apply_series(ours, [SeriesItem("git-updates", GLIBC_LIKE)], remove_empty=remove_empty)
    assert res.ok, [p.describe() for p in res.patches]
    assert tree_digest(ours) == tree_digest(theirs)
    assert (ours / "timezone/testdata/XT6").exists() is (not remove_empty)  # GNU: empty file, gone with -E


def test_remove_empty_removes_a_file_a_patch_empties(tmp_path: Path, run) -> None:
    body = b"--- a/gone.txt\n+++ b/gone.txt\n@@ -1 +0,0 @@\n-only line\n"
    plain = write_tree(tmp_path / "plain", {"gone.txt": b"only line\n", "kept.txt": b"x\n"})
    assert apply_series(plain, [SeriesItem("p", body)]).ok
    assert (plain / "gone.txt").read_bytes() == b""  # GNU patch without -E keeps the empty file
    d = _ledger(tmp_path / "l")
    (tmp_path / "empty.patch").write_bytes(body)
    assert run("--ledger", d / "patches.toml", "import", tmp_path / "empty.patch").code == 0
    tree = write_tree(tmp_path / "t", {"gone.txt": b"only line\n", "kept.txt": b"x\n"})
    r = run("--ledger", d / "patches.toml", "apply", "--tree", tree, "--remove-empty")
    assert r.code == 0, r
    assert not (tree / "gone.txt").exists() and (tree / "kept.txt").read_bytes() == b"x\n"


# ============================================================================ the ledger, import and export


def _ledger(d: Path, extra: str = "") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "patches.toml").write_text(
        'schema = 1\n\n[targets.deb]\nupstream = "https://example.invalid/deb.git"\ngithub = "example/deb"\n' + extra
    )
    return d


def test_import_keeps_text_patches_with_nul_bytes(tmp_path: Path, run) -> None:
    # vim's series carries patches whose text holds NUL bytes; GNU patch applies them as text
    d = _ledger(tmp_path / "l")
    q = tmp_path / "q"
    q.mkdir()
    (q / "nul.patch").write_bytes(b"Description: keep a NUL\n\n--- a/t.txt\n+++ b/t.txt\n@@ -1 +1 @@\n-a\n+a\x00b\n")
    (q / "series").write_text("nul.patch\n")
    r = run("--ledger", d / "patches.toml", "import", q)
    assert r.code == 0, r
    tree = write_tree(tmp_path / "tree", {"t.txt": b"a\n"})
    r = run("--ledger", d / "patches.toml", "apply", "--tree", tree, "--update-lock")
    assert r.code == 0, r
    assert (tree / "t.txt").read_bytes() == b"a\x00b\n"
    (q / "blob.patch").write_bytes(b"\x89PNG\x00\x00 not a diff")
    (q / "series").write_text("nul.patch\nblob.patch\n")
    r = run("--ledger", d / "patches.toml", "import", q)
    assert r.code == 2 and "blob.patch" in r.stderr and "not a patch" in r.stderr


def test_import_gives_same_named_patches_unique_ids_and_export_keeps_dirs_and_p0(tmp_path: Path, run) -> None:
    d = _ledger(tmp_path / "l")
    q = tmp_path / "q"
    for sub, line in (("a", "one"), ("b", "two")):
        (q / sub).mkdir(parents=True)
        (q / sub / "fix.patch").write_bytes(f"--- a/{sub}.txt\n+++ b/{sub}.txt\n@@ -1 +1 @@\n-x\n+{line}\n".encode())
    (q / "top.patch").write_bytes(b"--- t.txt\n+++ t.txt\n@@ -1 +1 @@\n-x\n+top\n")
    series = "a/fix.patch\nb/fix.patch\ntop.patch -p0\n"
    (q / "series").write_text(series)
    r = run("--ledger", d / "patches.toml", "import", "--json", q)
    assert r.code == 0, r
    assert sorted(json.loads(r.stdout)["added"]) == ["a-fix", "b-fix", "top"]
    led = load_ledger(d / "patches.toml")
    assert [p.id for p in led.patches] == ["a-fix", "b-fix", "top"]
    assert led.get("top").source.strip == 0
    out = tmp_path / "out"
    r = run("--ledger", d / "patches.toml", "export", "--format", "quilt", out)
    assert r.code == 0, r
    assert (out / "series").read_text() == series
    for name in ("a/fix.patch", "b/fix.patch", "top.patch"):
        assert (out / name).read_bytes() == (q / name).read_bytes()
    if shutil.which("quilt"):  # the export is a series quilt itself pushes
        tree = write_tree(tmp_path / "qt", {"a.txt": b"x\n", "b.txt": b"x\n", "t.txt": b"x\n"})
        shutil.copytree(out, tree / "patches")
        proc = subprocess.run(["quilt", "push", "-a", "-q"], cwd=tree, capture_output=True)
        assert proc.returncode == 0, proc.stderr
        assert [(tree / f).read_text() for f in ("a.txt", "b.txt", "t.txt")] == ["one\n", "two\n", "top\n"]


DEP3 = b"""Description: Fix use-after-free crash in frame_dealloc
 It was possible for the trashcan to delay the deallocation.
Origin: https://github.com/python/cpython/commit/46cae02085311481dc8b1ea9a5110969d9325bc7
Bug-upstream: https://github.com/python/cpython/issues/106092
Bug-Debian: https://bugs.debian.org/1050843
Bug-Ubuntu: https://launchpad.net/bugs/2000000
Forwarded: not-needed
Reviewed-by: Someone Else <se@example.org>
Last-Update: 2023-08-29
Applied-Upstream: 3.11.5

--- a/f.c
+++ b/f.c
@@ -1 +1 @@
-a
+b
"""


def test_dep3_fields_are_kept_and_classified(tmp_path: Path, run) -> None:
    meta = parse_meta(DEP3)
    assert meta.origin == "upstream"  # an upstream commit URL, without the word "upstream"
    assert meta.prs == [] and meta.issues == ["python/cpython#106092"]  # an issue is not a PR
    assert meta.commits == ["46cae02085311481dc8b1ea9a5110969d9325bc7"]
    d = _ledger(tmp_path / "l")
    (tmp_path / "frame.diff").write_bytes(DEP3)
    gitlab = b"Origin: https://gitlab.example.org/g/p/-/commit/0123456789abcdef\n\n--- a/f.c\n+++ b/f.c\n@@ -1 +1 @@\n-a\n+b\n"
    (tmp_path / "gl.diff").write_bytes(gitlab)
    firstline = b"GIT update of https://sourceware.org/git/glibc.git from glibc-2.36\n\n--- a/f.c\n+++ b/f.c\n"
    (tmp_path / "up.diff").write_bytes(firstline + b"@@ -1 +1 @@\n-a\n+c\n")
    r = run(
        "--ledger", d / "patches.toml", "import", tmp_path / "frame.diff", tmp_path / "gl.diff", tmp_path / "up.diff"
    )
    assert r.code == 0, r
    led = load_ledger(d / "patches.toml")
    p = led.get("frame")
    assert p.title == "Fix use-after-free crash in frame_dealloc" and p.origin == "upstream"
    assert p.upstream.issues == ["python/cpython#106092"] and p.upstream.prs == []
    assert p.dep3 == {
        "Origin": "https://github.com/python/cpython/commit/46cae02085311481dc8b1ea9a5110969d9325bc7",
        "Bug-upstream": "https://github.com/python/cpython/issues/106092",
        "Bug-Debian": "https://bugs.debian.org/1050843",
        "Bug-Ubuntu": "https://launchpad.net/bugs/2000000",
        "Forwarded": "not-needed",
        "Reviewed-by": "Someone Else <se@example.org>",
        "Last-Update": "2023-08-29",
        "Applied-Upstream": "3.11.5",
    }
    gl = led.get("gl")
    assert gl.origin == "upstream" and gl.upstream.commits == ["0123456789abcdef"]
    assert gl.dep3["Origin"] == "https://gitlab.example.org/g/p/-/commit/0123456789abcdef"
    assert led.get("up").title == "GIT update of https://sourceware.org/git/glibc.git from glibc-2.36"


def test_lock_keys_do_not_depend_on_where_the_layout_came_from(tmp_path: Path, run) -> None:
    # patches written in the installed layout, EXPECTED.sha256 imported while the target declares
    # no layout, then `apply --layout installed`: the same files must give the same keys
    d = _ledger(
        tmp_path / "l",
        'package = "flashinfer-python"\n[targets.deb.path_map]\n"include/" = "flashinfer/data/include/"\n',
    )
    rel = "flashinfer/data/include/attn.cuh"
    body = f"--- a/{rel}\n+++ b/{rel}\n@@ -1 +1 @@\n-old\n+new\n".encode()
    (tmp_path / "fix.patch").write_bytes(body)
    new_sha = hashlib.sha256(b"new\n").hexdigest()
    (tmp_path / "EXPECTED.sha256").write_text(f"{new_sha}  {rel}\n")
    r = run("--ledger", d / "patches.toml", "import", tmp_path / "fix.patch", tmp_path / "EXPECTED.sha256")
    assert r.code == 0, r
    tree = write_tree(tmp_path / "site", {rel: b"old\n"})
    r = run("--ledger", d / "patches.toml", "apply", "--tree", tree, "--layout", "installed")
    assert r.code == 0, r
    assert (tree / rel).read_bytes() == b"new\n"
    assert load_ledger(d / "patches.toml").lock.targets["deb"].files == {"include/attn.cuh": new_sha}


def test_apply_failure_is_reported_as_the_failure(tmp_path: Path, run) -> None:
    # patch 1 does not apply; patch 2 both applies and reverse-applies on the untouched tree (it adds
    # a line that repeats): the tree carries nothing, the report must say patch 1 failed
    d = _ledger(tmp_path / "l")
    q = tmp_path / "q"
    q.mkdir()
    (q / "one.patch").write_bytes(b"--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-not there\n+x\n")
    (q / "two.patch").write_bytes(b"--- a/b.txt\n+++ b/b.txt\n@@ -1 +1,2 @@\n x\n+x\n")
    (q / "series").write_text("one.patch\ntwo.patch\n")
    assert run("--ledger", d / "patches.toml", "import", q).code == 0
    tree = write_tree(tmp_path / "t", {"a.txt": b"a\n", "b.txt": b"x\nx\n"})
    before = tree_digest(tree)
    for extra in ([], ["--skip-applied"]):
        r = run("--ledger", d / "patches.toml", "apply", "--json", "--tree", tree, *extra)
        assert r.code == 1, r
        rep = json.loads(r.stdout)["targets"][0]
        assert rep["outcome"] == "failed" and "patch one does not apply" in rep["message"]
        assert "carries" not in rep["message"] and "--skip-applied" not in rep["message"]
        assert tree_digest(tree) == before


# ============================================================================ rebase


def _demo_ledger(root: Path, up: Path, patches: list[tuple[str, bytes, str]]) -> Path:
    (root / "patchset/series/demo").mkdir(parents=True)
    toml = ["schema = 1", "", "[targets.demo]", f'upstream = "{up}"', 'github = "example/demo"', 'base = "v1"', ""]
    for pid, data, extra in patches:
        (root / f"patchset/series/demo/{pid}.patch").write_bytes(data)
        toml += ["[[patch]]", f'id = "{pid}"', 'target = "demo"', f'title = "{pid}"', 'origin = "ours"', extra, ""]
    (root / "patches.toml").write_text("\n".join(toml))
    return root / "patches.toml"


def _lines(prefix: str, n: int = 30) -> str:
    return "".join(f"{prefix}{i}\n" for i in range(1, n + 1))


def test_rebase_carries_diff_ruN_new_files_next_to_a_moved_file(tmp_path: Path) -> None:
    up = tmp_path / "up"
    new_repo(up, {"pkg/nvidia/kda.py": _lines("k"), "pkg/other.py": _lines("o")}, "v1")
    git(up, "tag", "v1")
    git(up, "mv", "pkg/nvidia", "pkg/common")
    commit_files(up, "move nvidia/ to common/")
    git(up, "tag", "v2")
    ruN = (
        b"Description: a new module and a change to kda (made with diff -ruN)\n\n"
        b"diff -ruN a/pkg/new.py b/pkg/new.py\n"
        b"--- a/pkg/new.py\t1970-01-01 00:00:00.000000000 +0000\n"
        b"+++ b/pkg/new.py\t2026-01-01 10:00:00.000000000 +0000\n@@ -0,0 +1,2 @@\n+new\n+module\n"
        b"diff -ruN a/pkg/nvidia/kda.py b/pkg/nvidia/kda.py\n"
        b"--- a/pkg/nvidia/kda.py\t2026-01-01 09:00:00.000000000 +0000\n"
        b"+++ b/pkg/nvidia/kda.py\t2026-01-01 10:00:00.000000000 +0000\n"
        b"@@ -1,5 +1,5 @@\n k1\n k2\n-k3\n+k3 patched\n k4\n k5\n"
    )
    bare = b"--- a/pkg/plain.py\n+++ b/pkg/plain.py\n@@ -0,0 +1 @@\n+no stamp at all\n"
    led = _demo_ledger(tmp_path / "l", up, [("ruN", ruN, ""), ("bare", bare, "")])
    rep = rebase(RebaseRun(led, "v2"))
    got = {p.id: (p.verdict, p.how) for p in rep.patches}
    assert got == {"ruN": ("carried", "moved"), "bare": ("carried", "clean")}, rep.to_json()
    body = (led.parent / "patchset/series/demo/ruN.patch").read_bytes()
    # the body keeps its own style: its header, diff -ruN lines and timestamps; no git headers
    assert body.startswith(b"Description: a new module") and b"diff --git" not in body and b"\nindex " not in body
    assert b"--- a/pkg/new.py\t1970-01-01 00:00:00.000000000 +0000\n" in body
    assert b"+++ b/pkg/common/kda.py\t2026-01-01 10:00:00.000000000 +0000\n" in body
    files = {fp.target: fp for fp in parse_patch(body)}
    assert files["pkg/new.py"].op == "create" and files["pkg/common/kda.py"].op == "modify"
    assert load_ledger(led).targets["demo"].base == "v2"


def test_rebase_records_a_directory_base_by_what_it_is(tmp_path: Path, monkeypatch) -> None:
    old = write_tree(tmp_path / "old", {"a.py": _lines("a").encode()})
    new = write_tree(tmp_path / "vllm-9.9.0", {"a.py": b"# top\n" + _lines("a").encode(), "PKG-INFO": b""})
    (new / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.0\n\nlong text\n")
    root = tmp_path / "l"
    (root / "patchset/series/demo").mkdir(parents=True)
    (root / "patchset/series/demo/p.patch").write_bytes(b"--- a/a.py\n+++ b/a.py\n@@ -2 +2 @@\n-a2\n+a2 patched\n")
    (root / "patches.toml").write_text(
        'schema = 1\n[targets.demo]\nupstream = "x"\ngithub = "e/d"\n'
        f'base = "{old}"\n[[patch]]\nid = "p"\ntarget = "demo"\ntitle = "p"\norigin = "ours"\n'
    )
    monkeypatch.chdir(tmp_path)
    rep = rebase(RebaseRun(root / "patches.toml", "vllm-9.9.0"))  # typed relative to the working directory
    assert rep.patches[0].verdict == "carried", rep.to_json()
    t = load_ledger(root / "patches.toml").targets["demo"]
    assert t.base == str(new.resolve()) and t.base_version == "9.9.0"


def test_a_port_whose_pr_is_named_in_an_upstream_subject_is_superseded(tmp_path: Path) -> None:
    up = tmp_path / "up"
    new_repo(up, {"s.py": _lines("s"), "t.py": _lines("t")}, "v1")
    git(up, "tag", "v1")
    commit_files(up, "Rework the scheduler loop (#31000)", {"s.py": _lines("s").replace("s5\n", "s5 upstream way\n")})
    sha = commit_files(up, "Take the tokenizer fix (#42)", {"t.py": _lines("t").replace("t9\n", "t9 fixed\n")})
    commit_files(up, "Unrelated (#7)", {"u.py": "u\n"})
    git(up, "tag", "v2")
    port = b"--- a/s.py\n+++ b/s.py\n@@ -4,3 +4,3 @@\n s4\n-s5\n+s5 our way\n s6\n"
    verbatim = b"--- a/t.py\n+++ b/t.py\n@@ -8,3 +8,3 @@\n t8\n-t9\n+t9 fixed too\n t10\n"
    other = b"--- a/s.py\n+++ b/s.py\n@@ -19,3 +19,3 @@\n s19\n-s20\n+s20 ours\n s21\n"
    led = _demo_ledger(
        tmp_path / "l",
        up,
        [
            ("port", port, '[patch.upstream]\nports = ["example/demo#31000"]'),
            ("pr", verbatim, '[patch.upstream]\nprs = ["example/demo#42"]'),
            ("other-repo", other, '[patch.upstream]\nports = ["someone/else#7"]'),
        ],
    )
    rep = rebase(RebaseRun(led, "v2", dry_run=True))
    got = {p.id: p.verdict for p in rep.patches}
    assert got == {"port": "superseded", "pr": "already-upstream", "other-repo": "carried"}, rep.to_json()
    pr = next(p for p in rep.patches if p.id == "pr")
    assert any(sha[:12] in e["detail"] for e in pr.evidence)


# ============================================================================ real vLLM releases

GLM = "vllm/models/glm5next"


@pytest.mark.network
def test_diff_ruN_series_carries_new_files_across_the_real_0_31_move(tmp_path: Path) -> None:
    """A ``diff -ruN`` patch written on real vLLM 0.30.0: two new files (an Epoch-stamped one and a
    bare ``@@ -0,0`` one) next to edits of ``glm5next/nvidia/{kda,model}.py``, which 0.31.0 moved to
    ``common/``. Rebased onto the real 0.31.0, everything is carried and lands where it should."""
    h = release_history("vllm", ["0.30.0", "0.31.0"])
    v30, v31 = h.resolve("vllm==0.30.0"), h.resolve("vllm==0.31.0")
    stamp_old, stamp_new = "2026-01-01 09:00:00.000000000 +0000", "2026-01-01 10:00:00.000000000 +0000"
    parts = [b"Description: GB10 helpers (made with diff -ruN)\n\n"]
    for name in ("kda.py", "model.py"):
        path = f"{GLM}/nvidia/{name}"
        text = (h.read_blob(v30, path) or b"").decode()
        assert text, path
        lines = text.splitlines(keepends=True)
        at = next(i for i, ln in enumerate(lines) if ln.startswith("import ") or ln.startswith("from "))
        new = [*lines[:at], f"# patchset: GB10 note for {name}\n", *lines[at:]]
        hunk = "".join(difflib.unified_diff(lines, new, f"a/{path}\t{stamp_old}", f"b/{path}\t{stamp_new}", n=3))
        parts.append(f"diff -ruN a/{path} b/{path}\n".encode() + hunk.replace("\t\n", "\n").encode())
    parts.append(
        f"diff -ruN a/{GLM}/gb10.py b/{GLM}/gb10.py\n--- a/{GLM}/gb10.py\t1970-01-01 00:00:00.000000000 +0000\n"
        f"+++ b/{GLM}/gb10.py\t{stamp_new}\n@@ -0,0 +1,2 @@\n+# GB10 (sm_121) helpers\n+SM = 121\n".encode()
    )
    parts.append(f"--- a/{GLM}/gb10_bare.py\n+++ b/{GLM}/gb10_bare.py\n@@ -0,0 +1 @@\n+BARE = True\n".encode())
    body = b"".join(parts)
    root = tmp_path / "l"
    (root / "patchset/series/vllm").mkdir(parents=True)
    (root / "patchset/series/vllm/gb10.patch").write_bytes(body)
    (root / "patches.toml").write_text(
        'schema = 1\n[targets.vllm]\nupstream = "https://github.com/vllm-project/vllm.git"\n'
        'github = "vllm-project/vllm"\nbase = "vllm==0.30.0"\npackage = "vllm"\n'
        '[[patch]]\nid = "gb10"\ntarget = "vllm"\ntitle = "GB10 helpers"\norigin = "ours"\n'
    )
    rep = rebase(RebaseRun(root / "patches.toml", "vllm==0.31.0"))
    [res] = rep.patches
    assert (res.verdict, res.how) == ("carried", "moved"), rep.to_json()
    where = {f.path: f.new_path for f in res.files}
    assert where[f"{GLM}/nvidia/kda.py"] == f"{GLM}/common/kda.py"
    assert where[f"{GLM}/nvidia/model.py"] == f"{GLM}/common/model.py"
    assert where[f"{GLM}/gb10.py"] == f"{GLM}/gb10.py" and where[f"{GLM}/gb10_bare.py"] == f"{GLM}/gb10_bare.py"
    new_body = (root / "patchset/series/vllm/gb10.patch").read_bytes()
    assert b"diff --git" not in new_body and new_body.startswith(b"Description: GB10 helpers")
    # the new body applies to the real 0.31.0 tree with zero fuzz
    for fp in parse_patch(new_body):
        base = h.read_blob(v31, fp.path) if fp.op != "create" else None
        assert apply_file(base, fp).ok, fp.path


def test_rebase_of_a_dataless_binary_creation_upstream_now_has(tmp_path: Path) -> None:
    # glibc's git-updates.diff creates timezone/testdata/XT6 with a data-less binary stanza; trixie's
    # upstream has the (binary) file: nothing of the patch's is left to carry there, and no crash
    up = tmp_path / "up"
    new_repo(up, {"y.c": "a\n"}, "v1")
    git(up, "tag", "v1")
    commit_files(up, "add test data", {"t/XT6": b"TZif\x00\x01\x02binary\n", "t/other.bin": b"\x00\x01old\n"})
    git(up, "tag", "v2")
    stanza = (
        b"diff --git a/t/XT6 b/t/XT6\nnew file mode 100644\nindex 0000000000..07b393bb7d\n"
        b"Binary files /dev/null and b/t/XT6 differ\n"
    )
    clash = b"--- /dev/null\n+++ b/t/other.bin\n@@ -0,0 +1 @@\n+text of ours\n"
    led = _demo_ledger(tmp_path / "l", up, [("xt6", stanza, ""), ("clash", clash, "")])
    rep = rebase(RebaseRun(led, "v2", dry_run=True))
    got = {p.id: p.verdict for p in rep.patches}
    assert got == {"xt6": "already-upstream", "clash": "conflict"}, rep.to_json()
    [clash_file] = next(p for p in rep.patches if p.id == "clash").files
    assert "binary" in clash_file.message
