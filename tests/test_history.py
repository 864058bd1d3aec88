"""Release histories in git: fast-import of archives, queries, and a real (file://) upstream clone.

Local tests build small sdists and compare the imported trees with what plain ``git add``
makes; ``network`` tests import real vLLM releases 0.30.0 .. 0.33.0 from the package index.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from patchset.errors import EnvironmentFailure, InputError, UnsafePathError
from patchset.ledger.lock import sha256_file
from patchset.rebase.classify import moves_for
from patchset.upstream import releases
from patchset.upstream.archives import unpack
from patchset.upstream.clone import UpstreamClone
from patchset.upstream.history import ReleaseHistory, ReleaseId, build_history
from patchset.upstream.repo import RenameCandidate, ambiguous, similarity
from tests.support.localindex import LocalIndex

MTIME = 1_790_000_000
GIT_ID = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | GIT_ID
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def sdist(
    directory: Path,
    project: str,
    version: str,
    files: dict[str, bytes],
    *,
    executable: tuple[str, ...] = (),
    symlinks: dict[str, str] | None = None,
    mtime: int = MTIME,
    extra: list[tarfile.TarInfo] | None = None,
) -> Path:
    """Write ``<project>-<version>.tar.gz`` with a top directory, like a real sdist."""
    top = f"{project}-{version}"
    path = directory / f"{top}.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo(top)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, mtime
        tf.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime = len(data), mtime
            info.mode = 0o755 if name in executable else 0o644
            tf.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.type, info.linkname, info.mtime, info.mode = tarfile.SYMTYPE, target, mtime, 0o777
            tf.addfile(info)
        for info in extra or []:
            tf.addfile(info)
    return path


def body(n: int, tag: str = "") -> bytes:
    """A file of n distinct lines (so similarity scores are meaningful)."""
    return "".join(f"line {i} {tag}\n" for i in range(n)).encode()


V1 = {
    "pkg/__init__.py": b"",
    "pkg/nvidia/kda.py": body(200, "kda"),
    "pkg/nvidia/attention.py": body(150, "attn"),
    "pkg/core/utils.py": body(100, "utils"),
    "pkg/util.py": body(80, "shared"),
    "setup.py": b"setup()\n",
    "tools/build.sh": b"#!/bin/sh\necho build\n",
    "docs/old.md": b"old docs\n",
}


def v2_files() -> dict[str, bytes]:
    files = dict(V1)
    files["pkg/common/kda.py"] = files.pop("pkg/nvidia/kda.py")  # pure move
    files["pkg/common/attention.py"] = files.pop("pkg/nvidia/attention.py").replace(b"line 3 ", b"LINE 3 ")
    files["pkg/core/utils.py"] = body(90, "utils") + b"new tail\n"  # edited in place
    shared = files.pop("pkg/util.py")  # split into two equal copies: ambiguous
    files["pkg/a/util.py"] = shared
    files["pkg/b/util.py"] = shared
    del files["docs/old.md"]
    return files


@pytest.fixture
def archives(tmp_path):
    d = tmp_path / "dists"
    d.mkdir()
    a1 = sdist(d, "demo", "1.0", V1, executable=("tools/build.sh",), symlinks={"pkg/link.py": "core/utils.py"})
    a2 = sdist(d, "demo", "1.1", v2_files(), executable=("tools/build.sh",), mtime=MTIME + 86400)
    files3 = v2_files()
    files3["pkg/core/utils.py"] += b"more\n"
    a3 = sdist(d, "demo", "1.2", files3, executable=("tools/build.sh",), mtime=MTIME + 2 * 86400)
    return a1, a2, a3


@pytest.fixture
def repo(tmp_path):
    return ReleaseHistory(tmp_path / "demo.git", project="demo")


def naive_tree(tmp_path: Path, archive: Path) -> str:
    """The tree sha plain ``git add`` gives for the unpacked archive (the reference)."""
    work = tmp_path / f"naive-{archive.name}"
    unpack(archive, work)
    git(work, "init", "-q")
    git(work, "add", "-A")
    return git(work, "write-tree").strip()


# -- import ---------------------------------------------------------------------------------


def test_import_matches_git_add_and_keeps_modes(repo, archives, tmp_path):
    a1, _, _ = archives
    sha = repo.import_release(a1)
    assert git(repo.git_dir, "rev-parse", f"{sha}^{{tree}}").strip() == naive_tree(tmp_path, a1)
    tree = repo.tree(sha)
    assert tree["tools/build.sh"][0] == "100755"
    assert tree["setup.py"][0] == "100644"
    assert tree["pkg/link.py"][0] == "120000"
    assert repo.read_blob(sha, "pkg/link.py") == b"core/utils.py"
    assert git(repo.git_dir, "tag", "--points-at", sha).split() == ["v1.0"]
    assert git(repo.git_dir, "log", "-1", "--format=%ct %an%n%B", sha).startswith(f"{MTIME} demo release\ndemo 1.0\n")
    assert "Archive-Sha256: " + sha256_file(a1) in git(repo.git_dir, "log", "-1", "--format=%B", sha)
    git(repo.git_dir, "fsck", "--strict", "--no-progress")


def test_releases_chain_in_import_order_and_drop_deleted_files(repo, archives, tmp_path):
    shas = [repo.import_release(a) for a in archives]
    assert repo.releases() == [("1.0", shas[0]), ("1.1", shas[1]), ("1.2", shas[2])]
    assert git(repo.git_dir, "rev-list", "main").split() == shas[::-1]
    assert git(repo.git_dir, "rev-parse", f"{shas[1]}^").strip() == shas[0]
    assert "docs/old.md" in repo.list_files(shas[0]) and "docs/old.md" not in repo.list_files(shas[1])
    for sha, archive in zip(shas, archives, strict=False):
        assert git(repo.git_dir, "rev-parse", f"{sha}^{{tree}}").strip() == naive_tree(tmp_path, archive)


def test_import_is_idempotent_and_deterministic(repo, archives, tmp_path):
    a1, a2, _ = archives
    first = repo.import_release(a1)
    packs = sorted(p.name for p in (repo.git_dir / "objects/pack").iterdir())
    assert repo.import_release(a1) == first
    assert repo.import_release("demo==1.0") == first  # the spec maps to the same tag, no download
    assert sorted(p.name for p in (repo.git_dir / "objects/pack").iterdir()) == packs
    second = repo.import_release(a2)
    other = ReleaseHistory(tmp_path / "other.git")
    assert [other.import_release(a1), other.import_release(a2)] == [first, second]
    assert other.project == "demo"


def test_second_release_sends_only_changed_blobs(repo, archives):
    a1, a2, _ = archives
    repo.import_release(a1)
    before = set(
        git(repo.git_dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)").splitlines()
    )
    sha = repo.import_release(a2)
    after = set(
        git(repo.git_dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)").splitlines()
    )
    new_blobs = {line for line in after - before if line.endswith(" blob")}
    # attention.py and utils.py changed; the moved and duplicated files are reused by id
    assert len(new_blobs) == 2
    assert repo.read_blob(sha, "pkg/common/kda.py") == V1["pkg/nvidia/kda.py"]


def test_import_refuses_hostile_and_damaged_archives_without_trace(repo, archives, tmp_path):
    a1, _, _ = archives
    repo.import_release(a1)
    refs = git(repo.git_dir, "for-each-ref")
    evil = tarfile.TarInfo("demo-9.0/../../escape.py")
    evil.size = 0
    bad = sdist(tmp_path, "demo", "9.0", {"ok.py": b"ok\n"}, extra=[evil])
    with pytest.raises(UnsafePathError, match="climbs out"):
        repo.import_release(bad)
    dotgit = tarfile.TarInfo("demo-9.1/sub/.git/config")
    dotgit.size = 0
    with pytest.raises(UnsafePathError, match=r"\.git"):
        repo.import_release(sdist(tmp_path, "demo", "9.1", {"ok.py": b"ok\n"}, extra=[dotgit]))
    data = a1.read_bytes()
    truncated = tmp_path / "demo-9.2.tar.gz"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="damaged"):
        repo.import_release(truncated)
    assert git(repo.git_dir, "for-each-ref") == refs
    assert not list(repo.git_dir.glob("fast_import_crash_*"))
    assert not list((repo.git_dir / "objects/pack").glob("tmp_*"))


def test_import_input_errors(repo, archives, tmp_path):
    a1, a2, a3 = archives
    weird = tmp_path / "weird.tgz"
    weird.write_bytes(a1.read_bytes())
    with pytest.raises(InputError, match="cannot tell the release"):
        repo.import_release(weird)
    with pytest.raises(InputError, match="not found"):
        repo.import_release(tmp_path / "nope-1.0.tar.gz")
    with pytest.raises(InputError, match="does not belong"):
        repo.import_release(sdist(tmp_path, "other", "1.0", {"a": b""}))
    first = repo.import_release(a2)
    repo.import_release(a3)
    with pytest.raises(InputError, match="not an ancestor") as err:
        repo.import_release(sdist(tmp_path, "demo", "2.0", {"a": b""}), parent=first)
    assert "another branch" in err.value.render()
    side = repo.import_release(sdist(tmp_path, "demo", "2.0", {"a": b""}), parent=first, branch="side")
    assert git(repo.git_dir, "rev-parse", f"{side}^").strip() == first
    with pytest.raises(InputError, match="holds releases of 'demo'"):
        ReleaseHistory(repo.git_dir, project="vllm")


def test_import_wheel_keeps_installed_layout(tmp_path):
    import stat
    import zipfile

    wheel = tmp_path / "fi_demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data, perm in [
            ("fi_demo/__init__.py", b"", 0o644),
            ("fi_demo/data/include/attn.cuh", b"// attn\n", 0o644),
            ("fi_demo/bin/tool", b"#!/bin/sh\n", 0o755),
            ("fi_demo-1.0.dist-info/RECORD", b"", 0o644),
        ]:
            info = zipfile.ZipInfo(name, date_time=(2026, 9, 22, 5, 1, 0))
            info.create_system, info.external_attr = 3, (stat.S_IFREG | perm) << 16
            zf.writestr(info, data)
    repo = ReleaseHistory(tmp_path / "fi.git")
    sha = repo.import_release(wheel)
    assert repo.resolve("v1.0-wheel") == sha
    assert repo.read_blob(sha, "fi_demo/data/include/attn.cuh") == b"// attn\n"
    assert repo.tree(sha)["fi_demo/bin/tool"][0] == "100755"
    assert repo.project == "fi-demo"
    not_git = tmp_path / "plain"
    not_git.mkdir()
    (not_git / "file").write_text("x")
    with pytest.raises(InputError, match="not a git repository"):
        ReleaseHistory(not_git)


# -- queries --------------------------------------------------------------------------------


@pytest.fixture
def three(repo, archives):
    return [repo.import_release(a) for a in archives]


def test_resolve_accepts_shas_tags_branches_and_specs(repo, three):
    s1, s2, s3 = three
    assert repo.resolve(s1) == s1
    assert repo.resolve(s1[:10]) == s1
    assert repo.resolve("v1.1") == s2
    assert repo.resolve("main") == s3
    assert repo.resolve("demo==1.0") == s1
    assert repo.resolve(releases.ReleaseSpec("demo", "1.1")) == s2
    assert repo.resolve("1.2") == s3
    with pytest.raises(InputError, match="unknown revision 'v7'") as err:
        repo.resolve("v7")
    assert "PROJECT==VERSION" in err.value.render()
    with pytest.raises(InputError, match="does not belong"):
        repo.resolve("vllm==0.30.0")
    with pytest.raises(InputError, match="not imported"):
        repo.resolve("demo==3.0", import_missing=False)


def test_read_blob_list_files_log_and_ancestry(repo, three):
    s1, s2, s3 = three
    assert repo.read_blob("v1.0", "setup.py") == b"setup()\n"
    assert repo.read_blob("demo==1.1", "pkg/common/kda.py") == V1["pkg/nvidia/kda.py"]
    assert repo.read_blob(s2, "pkg/nvidia/kda.py") is None  # moved away
    assert repo.read_blob(s2, "pkg") is None  # a directory
    assert repo.read_blob(s1, "/setup.py") == b"setup()\n"
    assert repo.list_files(s1, "pkg/nvidia") == ["pkg/nvidia/attention.py", "pkg/nvidia/kda.py"]
    assert len(repo.list_files(s2)) == len(v2_files())
    touched = repo.log_range(s1, s3, "pkg/core/utils.py")
    assert [e.sha for e in touched] == [s3, s2]
    assert touched[0].subject == "demo 1.2" and touched[0].timestamp == MTIME + 2 * 86400
    assert [e.sha for e in repo.log_range(s1, s3, "setup.py")] == []
    assert [e.sha for e in repo.log_range("v1.0", "main")] == [s3, s2]
    assert [e.sha for e in repo.log_range(s1, s3, "pkg/common/kda.py", follow=True)] == [s2]
    assert repo.is_ancestor(s1, s3) and repo.is_ancestor(s2, s2)
    assert not repo.is_ancestor(s3, s1)


def test_moves_find_renames_and_ambiguity(repo, three):
    s1, s2, _ = three
    found = moves_for(repo, s1, s2, ["pkg/nvidia/kda.py", "pkg/nvidia/attention.py", "pkg/util.py", "docs/old.md"])
    assert found["pkg/nvidia/kda.py"].candidates == [RenameCandidate("pkg/common/kda.py", 100, "git")]
    (attn,) = found["pkg/nvidia/attention.py"].candidates
    assert attn.path == "pkg/common/attention.py" and attn.how == "git" and 90 <= attn.similarity < 100
    assert not found["pkg/nvidia/attention.py"].ambiguous
    split = found["pkg/util.py"].candidates
    assert sorted(c.path for c in split) == ["pkg/a/util.py", "pkg/b/util.py"]
    assert all(c.similarity == 100 for c in split) and ambiguous(split) and found["pkg/util.py"].ambiguous
    assert found["docs/old.md"].candidates == [] and found["docs/old.md"].path is None


def test_similarity_measure():
    a = body(100)
    assert similarity(a, a) == 100
    assert similarity(a, b"") == 0
    assert similarity(a, body(50)) == 49  # half the lines kept (shorter numbers, ~49% of bytes)
    assert similarity(a, body(100, "other")) < 10


def test_resolve_imports_missing_releases_from_the_index(tmp_path, monkeypatch, archives):
    a1, _a2, _a3 = archives
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    with LocalIndex(a1.parent) as index:
        monkeypatch.setenv("PATCHSET_INDEX_URL", index.url)
        repo = ReleaseHistory.for_project("demo")
        assert repo.git_dir == tmp_path / "cache/history/demo.git"
        s1 = repo.resolve("demo==1.0")  # imported on main
        s3 = repo.resolve("demo==1.2")  # newer: extends main
        s2 = repo.resolve("demo==1.1")  # older than the tip: own branch from 1.0
        assert repo.branch_tip("main") == s3
        assert repo.branch_tip("releases/1.1") == s2
        assert git(repo.git_dir, "rev-parse", f"{s2}^").strip() == s1
        assert index.requests["/files/demo-1.1.tar.gz"] == 1
        built = build_history("demo", ["1.0", "1.2"], history=repo)
        assert built == [("1.0", s1), ("1.2", s3)]


def test_build_history_with_progress(tmp_path, monkeypatch, archives):
    """One callback hears each release's download and import, in bytes, named with the release."""
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    with LocalIndex(archives[0].parent) as index:
        monkeypatch.setenv("PATCHSET_INDEX_URL", index.url)
        heard: list[tuple[str, int, int | None]] = []
        out = build_history("demo", ["1.0", "1.1", "1.2"], progress=lambda *a: heard.append(a))
        assert [v for v, _ in out] == ["1.0", "1.1", "1.2"]
        for i, archive in enumerate(archives, start=1):
            for step in ("download", "import"):
                what = f"demo {i}/3: {step} {archive.name}"
                got = [(done, total) for w, done, total in heard if w == what]
                assert got, (what, heard)
                size = archive.stat().st_size  # compressed bytes, for the import as for the download
                assert got[-1] == (size, size) and all(d <= size for d, _ in got)
        repo = ReleaseHistory.for_project("demo")
        assert git(repo.git_dir, "rev-list", "main").split() == [sha for _, sha in out][::-1]


# -- one identity per release ---------------------------------------------------------------


def test_a_release_is_one_release_id_whatever_the_history_holds(tmp_path, archives):
    """A history that imported an older release first holds 1.0-1.2 on other commits (a commit
    hashes its parent), but each release has the same ReleaseId there, and each history finds
    the other's."""
    older = sdist(tmp_path / "dists", "demo", "0.9", {"setup.py": b"setup(old=True)\n"}, mtime=MTIME - 86400)
    fresh = ReleaseHistory(tmp_path / "fresh.git", project="demo")
    shas = [fresh.import_release(a) for a in archives]
    other = ReleaseHistory(tmp_path / "other.git", project="demo")
    other.import_release(older)
    others = [other.import_release(a) for a in archives]
    assert shas[0] != others[0]  # the commit names the parent: 1.0 on 0.9 is another commit
    for version, a, b in zip(("1.0", "1.1", "1.2"), shas, others, strict=True):
        rid = fresh.release_id(a)
        assert rid == other.release_id(b) == other.release_id(f"demo=={version}")
        assert rid is not None and rid.spec == f"demo=={version}"
        assert rid.tree == git(fresh.git_dir, "rev-parse", f"{a}^{{tree}}").strip()
        assert other.find(rid) == b and fresh.find(rid) == a
    rid = fresh.release_id(shas[1])
    assert rid is not None and other.find(ReleaseId(rid.spec, fresh.release_id(shas[2]).tree)) is None  # another tree
    assert other.find(ReleaseId("demo==7.0", rid.tree)) is None
    assert fresh.release_id("no-such-ref") is None and fresh.release_id("demo==0.9") is None


def test_build_history_imports_in_version_order(tmp_path, monkeypatch, archives):
    """Listed newest first, the releases still make one line 1.0 -> 1.1 -> 1.2 on main; a release
    older than the tip is parented on the closest older one, never on the newer tip."""
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    with LocalIndex(archives[0].parent) as index:
        monkeypatch.setenv("PATCHSET_INDEX_URL", index.url)
        out = build_history("demo", ["1.2", "1.0", "1.1"])
        assert [v for v, _ in out] == ["1.2", "1.0", "1.1"]
        shas = dict(out)
        repo = ReleaseHistory.for_project("demo")
        assert git(repo.git_dir, "rev-list", "main").split() == [shas["1.2"], shas["1.1"], shas["1.0"]]
        late = ReleaseHistory(tmp_path / "late.git", project="demo")
        build_history("demo", ["1.2"], history=late)
        (_, s10), (_, s11) = build_history("demo", ["1.0", "1.1"], history=late)
        assert git(late.git_dir, "rev-list", "--parents", "-n", "1", s10).split() == [s10]  # not on 1.2
        assert git(late.git_dir, "rev-parse", f"{s11}^").strip() == s10
        assert late.release_id(s11) == repo.release_id(shas["1.1"])


# -- a real upstream over file:// ---------------------------------------------------------


@pytest.fixture
def upstream(tmp_path):
    up = tmp_path / "upstream"
    up.mkdir()
    git(up, "init", "-q", "-b", "main")
    git(up, "config", "uploadpack.allowFilter", "true")
    git(up, "config", "uploadpack.allowAnySHA1InWant", "true")
    (up / "vllm").mkdir()
    (up / "vllm/kda.py").write_bytes(body(120, "kda"))
    (up / "README.md").write_text("upstream\n")
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "first")
    git(up, "tag", "v0.30.0")
    return up


def test_upstream_clone_is_blobless_and_fetches_incrementally(tmp_path, upstream):
    url = upstream.as_uri()
    clone = UpstreamClone(url, tmp_path / "clone.git")
    assert not clone.cloned
    clone.sync()
    assert clone.cloned
    assert git(clone.git_dir, "config", "remote.origin.partialclonefilter").strip() == "blob:none"
    missing = [
        line
        for line in git(clone.git_dir, "rev-list", "--objects", "--all", "--missing=print").splitlines()
        if line.startswith("?")
    ]
    assert len(missing) == 2  # both blobs stay upstream until read
    v30 = clone.resolve("v0.30.0")
    assert clone.read_blob(v30, "vllm/kda.py") == body(120, "kda")  # fetched lazily
    git(upstream, "mv", "vllm/kda.py", "vllm/common_kda.py")
    git(upstream, "commit", "-q", "-m", "move kda")
    git(upstream, "tag", "v0.31.0")
    with pytest.raises(InputError, match="unknown revision"):
        clone.resolve("v0.31.0")
    clone.sync()
    v31 = clone.resolve("v0.31.0")
    assert clone.resolve("vllm==0.31.0") == v31
    with pytest.raises(InputError, match="not in the clone"):
        clone.resolve("vllm==0.32.0")
    assert clone.resolve("main") == v31
    assert clone.is_ancestor(v30, v31)
    assert moves_for(clone, v30, v31, ["vllm/kda.py"])["vllm/kda.py"].path == "vllm/common_kda.py"
    assert [e.subject for e in clone.log_range(v30, v31)] == ["move kda"]
    with pytest.raises(InputError, match="is a clone of"):
        UpstreamClone(tmp_path.joinpath("elsewhere").as_uri(), clone.git_dir).sync()


def test_upstream_clone_failure_leaves_nothing(tmp_path):
    target = tmp_path / "clone.git"
    with pytest.raises(EnvironmentFailure, match="cannot clone"):
        UpstreamClone((tmp_path / "no-such-repo").as_uri(), target).sync()
    assert not target.exists()
    assert [p for p in tmp_path.iterdir()] == []


# -- real vLLM releases -------------------------------------------------------------------

VLLM = ["0.30.0", "0.31.0", "0.32.0", "0.33.0"]


@pytest.fixture
def pypi(monkeypatch):
    reason = releases.probe_index()
    if reason:
        pytest.skip(f"network test: {reason}")


@pytest.mark.network
def test_real_vllm_history(pypi, tmp_path):
    """Four real releases, one commit each, with the glm5next move of 0.31.0 found by the rebaser's move detection."""
    repo = ReleaseHistory(tmp_path / "vllm.git", project="vllm")
    built = build_history("vllm", VLLM, history=repo)
    shas = [sha for _, sha in built]
    assert git(repo.git_dir, "rev-list", "main").split() == shas[::-1]
    v30, v31, v32, v33 = shas
    assert repo.read_blob(v30, "vllm/models/glm5next/nvidia/kda.py") is not None
    assert repo.read_blob(v31, "vllm/models/glm5next/nvidia/kda.py") is None
    assert repo.read_blob(v31, "vllm/models/glm5next/common/kda.py") is not None
    moved = ["vllm/models/glm5next/nvidia/" + n for n in ("attention.py", "kda.py", "model.py")]
    found = moves_for(repo, v30, v31, moved)
    for path in moved:
        best = found[path].candidates[0]
        assert best.path == path.replace("/nvidia/", "/common/") and best.how == "git"
        assert best.similarity >= 50 and not found[path].ambiguous
    # files that change in every release
    for path in ("vllm/v1/core/kv_cache_utils.py", "vllm/platforms/cuda.py"):
        assert [e.sha for e in repo.log_range(v30, v33, path)] == [v33, v32, v31]
    # executable bits come from the tar members
    with tarfile.open(releases.download("vllm==0.30.0")) as tf:
        execs = {m.name.split("/", 1)[1] for m in tf if m.isfile() and m.mode & 0o111}
    tree = repo.tree(v30)
    assert execs and {p for p, (mode, _) in tree.items() if mode == "100755"} == execs
    assert len(tree) == 7164
    # idempotent, and deterministic in a second repository
    assert repo.import_release("vllm==0.31.0") == v31
    again = ReleaseHistory(tmp_path / "again.git")
    assert again.import_release(releases.download("vllm==0.30.0")) == v30


@pytest.mark.network
def test_real_releases_are_one_release_id_with_an_older_history(pypi, tmp_path):
    """A history that holds 0.29.0 first (as a user's cache does after ordinary use) and then the
    releases a test asks for names each of them as the same release a fresh history does."""
    fresh = ReleaseHistory(tmp_path / "fresh.git", project="vllm")
    built = dict(build_history("vllm", VLLM[:2], history=fresh))
    older = ReleaseHistory(tmp_path / "older.git", project="vllm")
    build_history("vllm", ["0.29.0"], history=older)
    again = dict(build_history("vllm", VLLM[:2], history=older))
    assert git(older.git_dir, "rev-parse", f"{again['0.30.0']}^").strip() == older.resolve("vllm==0.29.0")
    for version in VLLM[:2]:
        rid = fresh.release_id(built[version])
        assert rid is not None and rid == older.release_id(again[version]) and older.find(rid) == again[version]
