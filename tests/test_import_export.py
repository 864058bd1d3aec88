"""Import and export: quilt round trip byte for byte, real `quilt push -a` and `git am` on exports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.repo import git, new_repo

BASE_FILES = {
    "pkg/a.py": "def a():\n    return 1\n\n\nVALUE = 'a'\n",
    "pkg/b.py": "import os\n\n\ndef b(x):\n    return x * 2\n",
    "README": "demo\n",
}


def make_repo(root: Path) -> Path:
    new_repo(root, BASE_FILES)
    return root


def make_series(tmp: Path) -> tuple[Path, Path]:
    """A real repo with three commits, exported as format-patch mails into a quilt directory."""
    repo = make_repo(tmp / "upstream")
    edits = [
        ("pkg/a.py", "    return 1\n", "    return 2\n", "Make a() return 2"),
        ("pkg/b.py", "    return x * 2\n", "    return x * 3\n", "Triple in b()"),
        ("pkg/a.py", "VALUE = 'a'\n", "VALUE = 'A'\n", "Upper-case VALUE"),
    ]
    for rel, old, new, msg in edits:
        f = repo / rel
        f.write_text(f.read_text().replace(old, new))
        git(repo, "commit", "-q", "-am", msg + "\n\nSee https://github.com/example/demo/pull/12")
    quilt = tmp / "quilt"
    quilt.mkdir()
    git(repo, "format-patch", "-q", "-o", str(quilt), "HEAD~3")
    names = sorted(p.name for p in quilt.iterdir())
    (quilt / "series").write_text("# our series\n" + "".join(f"{n}\n" for n in names))
    return repo, quilt


def test_quilt_round_trip_and_quilt_push(run, ledger_dir: Path, tmp_path: Path) -> None:
    repo, quilt = make_series(tmp_path)
    r = run("import", "--json", quilt, cwd=ledger_dir)
    assert r.code == 0, r
    added = json.loads(r.stdout)["added"]
    assert added == ["0001-Make-a-return-2", "0002-Triple-in-b", "0003-Upper-case-VALUE"]
    r = run("show", "--json", "0002-Triple-in-b", cwd=ledger_dir)
    shown = json.loads(r.stdout)
    assert shown["title"] == "Triple in b()"
    assert shown["upstream"]["prs"] == ["example/demo#12"]
    assert shown["body_state"] == "present"
    assert shown["diffstat"] == [{"path": "pkg/b.py", "added": 1, "removed": 1, "op": "modified"}]
    # a second import changes nothing
    r = run("import", "--json", quilt, cwd=ledger_dir)
    assert json.loads(r.stdout)["unchanged"] == added
    out = tmp_path / "exported"
    assert run("export", "--format", "quilt", out, cwd=ledger_dir).code == 0
    series_in = [ln for ln in (quilt / "series").read_text().splitlines() if not ln.startswith("#")]
    assert (out / "series").read_text().splitlines() == series_in
    for name in series_in:
        assert (out / name).read_bytes() == (quilt / name).read_bytes()
    # real quilt accepts it on the base tree
    if not shutil.which("quilt"):
        pytest.skip("quilt is not installed (Debian package `quilt`; .ci/run installs it)")
    work = tmp_path / "work"
    shutil.copytree(repo, work, ignore=shutil.ignore_patterns(".git"))
    git(repo, "show", "HEAD~3:pkg/a.py")  # sanity: base exists
    for rel, text in BASE_FILES.items():
        (work / rel).write_text(text)
    (work / "patches").symlink_to(out)
    env = {**os.environ, "QUILT_PATCHES": "patches", "QUILTRC": "/dev/null"}
    q = subprocess.run(["quilt", "push", "-a"], cwd=work, capture_output=True, text=True, env=env)
    assert q.returncode == 0, q.stdout + q.stderr
    assert (work / "pkg/a.py").read_text() == (repo / "pkg/a.py").read_text()
    assert (work / "pkg/b.py").read_text() == (repo / "pkg/b.py").read_text()


def test_diffstat_of_a_real_git_mail(tmp_path: Path) -> None:
    """``show``'s diffstat comes from the engine's parser: renames by their new path, git-quoted
    names unquoted, binary files counted as 0/0, the mail header ignored."""
    from patchset.commands.inspection import diffstat

    repo = make_repo(tmp_path / "r")
    git(repo, "mv", "pkg/a.py", "pkg/a2.py")
    (repo / "pkg/a2.py").write_text(BASE_FILES["pkg/a.py"].replace("VALUE = 'a'\n", "VALUE = 'b'\n"))
    (repo / "README").unlink()
    (repo / "dir é").mkdir()
    (repo / "dir é" / "ü.txt").write_text("one\ntwo\n")
    (repo / "logo.bin").write_bytes(b"\0\1\2")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Move a, drop the README, add two files")
    mail = git(repo, "format-patch", "-M", "--stdout", "-1").encode()
    stats = {s.path: (s.added, s.removed, s.op) for s in diffstat(mail)}
    assert stats == {
        "pkg/a2.py": (1, 1, "renamed"),
        "README": (0, 1, "deleted"),
        "dir é/ü.txt": (2, 0, "new"),
        "logo.bin": (0, 0, "new"),
    }
    assert diffstat(b"no diff in here\n") == []


def test_mbox_export_git_am(run, ledger_dir: Path, tmp_path: Path) -> None:
    repo, quilt = make_series(tmp_path)
    # strip the mail headers from one body so the exporter has to build its own mail
    plain = quilt / "0002-Triple-in-b.patch"
    body = plain.read_bytes()
    plain.write_bytes(body[body.index(b"diff --git") :])
    assert run("import", quilt, cwd=ledger_dir).code == 0
    out = tmp_path / "mbox"
    assert run("export", "--format", "mbox", out, cwd=ledger_dir).code == 0
    target = make_repo(tmp_path / "am")
    git(target, "am", "-q", str(out / "series.mbox"))
    log = git(target, "log", "--format=%s%n%b", "-3")
    assert "Make a() return 2" in log and "Upper-case VALUE" in log
    assert "Patch-Id: 0002-Triple-in-b" in log and "Origin: ours" in log
    assert git(target, "rev-parse", "HEAD^{tree}") == git(repo, "rev-parse", "HEAD^{tree}")


def test_dep3_yocto_headers(run, ledger_dir: Path, tmp_path: Path) -> None:
    p = tmp_path / "fix-gate.patch"
    p.write_text(
        "Description: Gate the fast path on capability 12\n"
        " Longer text about why.\n"
        "Author: Jane Dev <jane@example.com>\n"
        "Origin: upstream, https://github.com/vllm-project/vllm/pull/58021\n"
        "Upstream-Status: Backport [0.31.0]\n"
        "Last-Update: 2026-09-26\n"
        "---\n"
        "--- a/f.py\n+++ b/f.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    assert run("import", p, cwd=ledger_dir).code == 0
    d = json.loads(run("show", "--json", "fix-gate", cwd=ledger_dir).stdout)
    assert d["title"] == "Gate the fast path on capability 12"
    assert d["authors"] == ["Jane Dev"]
    assert d["origin"] == "upstream"
    assert d["upstream"]["prs"] == ["vllm-project/vllm#58021"]
    assert "Backport [0.31.0]" in d["notes"]


def test_numbered_patches_without_series(run, ledger_dir: Path, tmp_path: Path) -> None:
    d = tmp_path / "numbered"
    d.mkdir()
    for n in ("10-c.patch", "02-b.patch", "01-a.diff"):
        (d / n).write_text(f"--- a/{n}\n+++ b/{n}\n@@ -1 +1 @@\n-a\n+b\n")
    r = run("import", "--json", d, cwd=ledger_dir)
    assert json.loads(r.stdout)["added"] == ["01-a", "02-b", "10-c"]


def test_expected_sha256_round_trip(run, ledger_dir: Path, tmp_path: Path) -> None:
    exp = tmp_path / "EXPECTED.sha256"
    lines = [f"{'a' * 64}  vllm/platforms/cuda.py", f"{'b' * 64}  vllm/v1/core/kv_cache_utils.py"]
    exp.write_text("\n".join(lines) + "\n")
    assert run("import", exp, cwd=ledger_dir).code == 0
    out = tmp_path / "exp-out"
    assert run("export", "--format", "expected", out, cwd=ledger_dir).code == 0
    assert (out / "EXPECTED.sha256").read_text() == exp.read_text()
    bad = tmp_path / "BAD.sha256"
    bad.write_text(f"{'a' * 64}  ok.py\nnot-a-hash  x.py\n")
    r = run("import", bad, cwd=ledger_dir)
    assert r.code == 2 and "BAD.sha256:2" in r.stderr


def test_import_errors_leave_files_untouched(run, ledger_dir: Path, tmp_path: Path, digest) -> None:
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_text("a.patch\nmissing.patch\n")
    (q / "a.patch").write_text("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    before = digest(ledger_dir)
    r = run("import", q, cwd=ledger_dir)
    assert r.code == 2 and "series:2" in r.stderr and "missing.patch" in r.stderr
    assert digest(ledger_dir) == before
    r = run("import", "--target", "nope", q / "a.patch", cwd=ledger_dir)
    assert r.code == 2 and "unknown target 'nope'" in r.stderr
    assert digest(ledger_dir) == before
