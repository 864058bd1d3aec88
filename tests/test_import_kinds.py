"""What ``import`` takes and what it refuses (issue #25): a file that is not a diff is named for what
it is and pointed at the import that fits it (``--overlay`` for a modified source file, ``--script``
for an edit script, ``--manifest`` for an overlay manifest); a directory with nothing importable
says what it found; an mbox becomes one patch per mail, as ``git am`` makes one commit per mail."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from patchset.ledger.store import load_ledger
from tests.support.repo import git, tree_digest

EDIT_SCRIPT = """\
import sys
from pathlib import Path

p = Path(sys.argv[1])
text = p.read_text()
assert text.count("CAP = (9, 10)") == 1
p.write_text(text.replace("CAP = (9, 10)", "CAP = (9, 10, 12)"))
"""


@pytest.fixture
def led(run, tmp_path: Path) -> Path:
    d = tmp_path / "led"
    d.mkdir()
    assert run("init", "--target", "vllm", cwd=d).code == 0
    return d


@pytest.mark.parametrize(
    ("name", "data", "said", "pointer"),
    [
        ("cache.py", "import os\n\ndef f():\n    return 1\n", "a source file", "--overlay DIR"),
        ("patch_cuda.py", EDIT_SCRIPT, "an edit script", "--script 'python3 patch_cuda.py {root}/PATH'"),
        (
            "MANIFEST.json",
            '{"files": [{"overlay_file": "vllm/x.py"}]}',
            "an overlay manifest",
            "--manifest MANIFEST.json",
        ),
        ("data.json", '{"a": 1}', "JSON", "--overlay --manifest"),
        ("empty.patch", "", "the file is empty", "import patch files"),
        ("cover.patch", "From: A <a@x>\nSubject: [PATCH 0/3] cover\n\nwords\n", "a mail without a patch", "mails"),
    ],
)
def test_a_file_that_is_not_a_diff_points_at_the_import_that_fits(
    run, led: Path, tmp_path: Path, name: str, data: str, said: str, pointer: str
) -> None:
    f = tmp_path / name
    f.write_text(data)
    before = tree_digest(led)
    r = run("import", f, cwd=led)
    assert r.code == 2, r
    assert name in r.stderr and f"not a diff: {said}" in r.stderr and pointer in r.stderr, r.stderr
    assert "nothing was imported" in r.stderr and "Traceback" not in r.stderr
    assert tree_digest(led) == before


def test_a_directory_with_nothing_importable_says_what_it_found(run, led: Path, tmp_path: Path) -> None:
    kit = tmp_path / "overlays"
    (kit / "vllm/config").mkdir(parents=True)
    (kit / "vllm/config/cache.py").write_text("x = 1\n")
    (kit / "vllm/platforms.py").write_text("y = 1\n")
    (kit / "MANIFEST.json").write_text("{}")
    before = tree_digest(led)
    r = run("import", kit, cwd=led)
    assert r.code == 2, r
    assert "nothing to import" in r.stderr and "3 file(s) (2 .py, 1 .json" in r.stderr, r.stderr
    assert "vllm/config/cache.py" in r.stderr and f"--overlay {kit}" in r.stderr
    scripts = tmp_path / "mods"
    scripts.mkdir()
    (scripts / "patch_cuda.py").write_text(EDIT_SCRIPT)
    r = run("import", scripts, cwd=led)
    assert r.code == 2 and f"--script 'python3 {scripts / 'patch_cuda.py'} {{root}}/" in r.stderr, r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run("import", empty, cwd=led)
    assert r.code == 2 and "the directory is empty" in r.stderr, r.stderr
    assert tree_digest(led) == before


def _five_commit_mbox(tmp_path: Path) -> tuple[Path, Path]:
    repo = tmp_path / "up"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "vllm").mkdir()
    (repo / "vllm/a.py").write_text("".join(f"a{i} = {i}\n" for i in range(30)))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "tag", "base")
    for n in range(5):
        text = (repo / "vllm/a.py").read_text().replace(f"a{n * 5} = {n * 5}\n", f"a{n * 5} = {n * 500 + 1}\n")
        (repo / "vllm/a.py").write_text(text)
        # a commit message line that starts with "From " must not split a mail
        git(repo, "commit", "-qam", f"change {n}\n\nFrom the downstream tree, step {n}.")
    mbox = tmp_path / "series.mbox"
    mbox.write_text(git(repo, "format-patch", "--stdout", "base..main"))
    return repo, mbox


def test_an_mbox_is_one_patch_per_mail_as_git_am_makes_one_commit_per_mail(run, led: Path, tmp_path: Path) -> None:
    repo, mbox = _five_commit_mbox(tmp_path)
    am = tmp_path / "am"
    git(tmp_path, "clone", "-q", str(repo), str(am))
    git(am, "checkout", "-q", "base")
    git(am, "-c", "user.email=x@y", "-c", "user.name=x", "am", "-q", str(mbox))
    assert git(am, "rev-list", "--count", "base..HEAD").strip() == "5"
    r = run("import", mbox, "--json", cwd=led)
    assert r.code == 0, r
    added = json.loads(r.stdout)["added"]
    assert added == [f"{n + 1:04d}-change-{n}" for n in range(5)], added
    r = run("show", added[2], "--json", cwd=led)
    shown = json.loads(r.stdout)
    assert shown["title"] == "change 2" and shown["authors"] == [git(repo, "log", "-1", "--format=%an").strip()]
    tree = tmp_path / "tree"
    git(tmp_path, "clone", "-q", str(repo), str(tree))
    git(tree, "checkout", "-q", "base")
    git(tree, "checkout", "-q", "-b", "work")
    r = run("apply", "--repo", tree, cwd=led)
    assert r.code == 0, r
    assert git(tree, "rev-list", "--count", "base..patchset/vllm").strip() == "5"
    assert (tree / "vllm/a.py").read_bytes() == (am / "vllm/a.py").read_bytes()
    # the same mbox again changes nothing
    r = run("import", mbox, "--json", cwd=led)
    assert r.code == 0 and len(json.loads(r.stdout)["unchanged"]) == 5, r


# ---- any diff root ------------------------------------------------------------------------------
def _udiff(old_name: str, new_name: str, old: str, new: str) -> str:
    import difflib

    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), old_name, new_name))


BASE_FILES = {
    "vllm/platforms/cuda.py": "".join(f"c{i} = {i}\n" for i in range(20)),
    "vllm/v1/attention/flash.py": "".join(f"f{i} = {i}\n" for i in range(20)),
    "vllm/config.py": "".join(f"v{i} = {i}\n" for i in range(20)),
    "config.py": "".join(f"t{i} = {i}\n" for i in range(20)),
}
STYLES = {  # id: (as the diff names the file, the file it is, the reading import must infer)
    "abs-prefix": ("a/usr/local/lib/python3.12/dist-packages/vllm/platforms/cuda.py", "vllm/platforms/cuda.py", 6, ""),
    "p0": ("vllm/platforms/cuda.py", "vllm/platforms/cuda.py", 0, ""),
    "in-package": ("b/v1/attention/flash.py", "vllm/v1/attention/flash.py", 1, "vllm/"),
}


def _base(tmp_path: Path) -> Path:
    base = tmp_path / "base"
    for rel, text in BASE_FILES.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text)
    return base


@pytest.mark.parametrize("style", sorted(STYLES))
def test_import_works_out_the_diff_root_against_the_base(run, led: Path, tmp_path: Path, style: str) -> None:
    named, real, strip, root = STYLES[style]
    base = _base(tmp_path)
    old = BASE_FILES[real]
    new = old.replace(" = 5\n", " = 500\n")
    f = tmp_path / f"{style}.patch"
    f.write_text(_udiff(named, named.replace("a/", "b/", 1), old, new))
    r = run("import", f, "--target", "vllm", "--base-tree", base, cwd=led)
    assert r.code == 0, r
    assert f"{style}: file names read as -p{strip}" in r.stdout and "fits the base's files" in r.stdout, r.stdout
    ledger = load_ledger(led / "patches.toml")
    assert ledger.targets["vllm"].base == str(base.resolve())  # --base-tree recorded: the target had none
    p = ledger.get(style)
    assert p.source.strip == (strip if strip != 1 else None) and p.source.root == root
    tree = tmp_path / "tree"
    shutil.copytree(base, tree)
    r = run("apply", "--tree", tree, cwd=led)
    assert r.code == 0, r
    assert (tree / real).read_text() == new


def test_an_install_prefix_is_read_from_the_package_without_a_base(run, led: Path, tmp_path: Path) -> None:
    named = "/usr/local/lib/python3.12/dist-packages/vllm/platforms/cuda.py"
    f = tmp_path / "abs.patch"
    old = BASE_FILES["vllm/platforms/cuda.py"]
    f.write_text(_udiff(named, named, old, old.replace(" = 5\n", " = 6\n")))
    r = run("import", f, "--json", cwd=led)
    assert r.code == 0, r
    assert json.loads(r.stdout)["inferred"] == {
        "abs": "-p6 (vllm/platforms/cuda.py): the reading that fits the target's package"
    }


def test_two_readings_that_fit_are_a_question(run, led: Path, tmp_path: Path) -> None:
    base = _base(tmp_path)
    f = tmp_path / "cfg.patch"
    vcfg = BASE_FILES["vllm/config.py"]
    f.write_text(_udiff("a/config.py", "b/config.py", vcfg, vcfg.replace("v5", "w5")))  # both files exist
    before = tree_digest(led)
    r = run("import", f, "--target", "vllm", "--base-tree", base, cwd=led)
    assert r.code == 2, r
    assert "fit several readings: -p1 (config.py); -p1 under vllm/ (vllm/config.py)" in r.stderr, r.stderr
    assert "--strip N" in r.stderr and "--root DIR" in r.stderr
    assert tree_digest(led) == before
    r = run("import", f, "--target", "vllm", "--base-tree", base, "--root", "vllm", cwd=led)
    assert r.code == 0, r
    tree = tmp_path / "tree"
    shutil.copytree(base, tree)
    assert run("apply", "--tree", tree, cwd=led).code == 0
    assert "w5 = 5" in (tree / "vllm/config.py").read_text() and "w5" not in (tree / "config.py").read_text()


BAD_BODIES = {
    # a hunk header without line numbers, a hunk shorter than its header says: GNU patch rejects both
    "no-numbers.diff": b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ @@\n a = 1\n+b = 2\n",
    "short-hunk.diff": b"--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,5 +1,6 @@\n a = 1\n+b = 2\n",
}


@pytest.mark.parametrize("name", sorted(BAD_BODIES))
def test_a_malformed_body_is_refused_at_import_in_the_words_validate_uses(run, led: Path, tmp_path: Path, name) -> None:
    """Issue 33: import, validate and apply read a body with one reader and say the same thing."""
    body = BAD_BODIES[name]
    tree = tmp_path / "tree"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm/x.py").write_text("a = 1\n")
    if shutil.which("patch"):
        gnu = subprocess.run(["patch", "--dry-run", "-p1", "-d", str(tree)], input=body, capture_output=True)
        assert gnu.returncode != 0, gnu.stdout  # the oracle refuses it too
    f = tmp_path / name
    f.write_bytes(body)
    before = tree_digest(led)
    r = run("import", f, cwd=led)
    assert r.code == 2 and "apply would refuse this body" in r.stderr and "nothing was imported" in r.stderr, r
    assert tree_digest(led) == before
    words = r.stderr.split(f"{name}: ", 1)[1].split(": apply would refuse", 1)[0]
    # the same body put in the ledger by hand: validate names it in the same words
    (led / "patchset/series/vllm").mkdir(parents=True, exist_ok=True)
    (led / "patchset/series/vllm" / name).write_bytes(body)
    with open(led / "patches.toml", "a") as fh:
        fh.write(
            f'\n[[patch]]\nid = "bad"\ntarget = "vllm"\ntitle = "bad"\norigin = "ours"\nbody = "patchset/series/vllm/{name}"\n'
        )
    r = run("validate", cwd=led)
    assert r.code == 1 and words in r.stdout + r.stderr, (words, r)
