"""``import REPO`` surveys a whole build repository (issue 33), on fixtures made of real vLLM 0.30.0
files from the package index: recipes (``mods/NAME/run.sh`` applying a diff beside it with
``patch -p1 -d /``, ``git apply``), patches two levels down, a ``patches/`` folder of hotfix scripts
beside diffs, a Dockerfile with a RUN heredoc edit, PRs and a fork ref, a ``.gitmodules`` fork, an
overlay folder, and three bodies GNU patch rejects or that name the repository's own folder.
GNU ``patch --dry-run`` is the oracle for which bodies are malformed and which apply."""

from __future__ import annotations

import difflib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from patchset.ledger.store import load_ledger
from tests.support.repo import release_history, tree_digest

pytestmark = pytest.mark.network

V30 = "vllm==0.30.0"
CUDA, KV, DEVICE, CACHE = (
    "vllm/platforms/cuda.py",
    "vllm/v1/core/kv_cache_utils.py",
    "vllm/config/device.py",
    "vllm/config/cache.py",
)
SITE = "usr/local/lib/python3.12/dist-packages/"


@pytest.fixture(scope="module")
def stock():
    history = release_history("vllm", ["0.30.0"])
    c30 = history.resolve(V30)
    return {p: history.read_blob(c30, p) for p in (CUDA, KV, DEVICE, CACHE)}


def _edit(data: bytes, at: int, text: bytes) -> bytes:
    """A downstream change: a comment line inserted ``at`` a fraction of the way down the file."""
    lines = data.splitlines(keepends=True)
    k = int(len(lines) * at / 10)
    while not lines[k].strip():
        k += 1
    indent = lines[k][: len(lines[k]) - len(lines[k].lstrip())]
    return b"".join([*lines[:k], indent + b"# " + text + b"\n", *lines[k:]])


def _diff(old: bytes, new: bytes, a: str, b: str) -> bytes:
    lines = difflib.unified_diff(
        old.decode().splitlines(keepends=True), new.decode().splitlines(keepends=True), a, b, n=3
    )
    return f"diff --git {a} {b}\n".encode() + "".join(lines).encode()


def _repo(root: Path, stock: dict[str, bytes]) -> tuple[Path, dict[str, bytes]]:
    """A community build repository in the shapes of issue 33, and the files its good diffs make."""
    want = {
        CUDA: _edit(stock[CUDA], 3, b"sm_121: treat GB10 as a Blackwell part"),
        KV: _edit(stock[KV], 5, b"keep the prefix cache across block sizes"),
        DEVICE: _edit(stock[DEVICE], 4, b"device: honour CUDA_VISIBLE_DEVICES order"),
    }
    files = {
        # a recipe applying a diff whose names carry the image's install prefix, with -d /
        "mods/gb10-cuda/run.sh": '#!/bin/bash\nset -e\nHERE="$(dirname "$0")"\n'
        'patch -p1 -d / < "$HERE/fix.diff"\npython -c "import vllm"\n',
        "mods/gb10-cuda/fix.diff": _diff(stock[CUDA], want[CUDA], f"a/{SITE}{CUDA}", f"b/{SITE}{CUDA}"),
        # a recipe with git apply on a git-style diff
        "mods/kv-prefix/run.sh": "#!/bin/sh\ncd /workspace/vllm && git apply kv.patch\n",
        "mods/kv-prefix/kv.patch": _diff(stock[KV], want[KV], f"a/{KV}", f"b/{KV}"),
        # patches two levels down, hotfix scripts beside them
        "container/patches/device.diff": _diff(stock[DEVICE], want[DEVICE], f"a/{DEVICE}", f"b/{DEVICE}"),
        "container/patches/hotfix-01-flags.sh": f"#!/bin/sh\nsed -i 's/x/y/' /{SITE}vllm/envs.py\n",
        "container/patches/hotfix-02-moe.py": "import pathlib\np = pathlib.Path('/"
        f"{SITE}vllm/model_executor/layers/fused_moe/layer.py')\n"
        "p.write_text(p.read_text().replace('a', 'b'))\n",
        "container/patches/hotfix-03-env.sh": "#!/bin/sh\nexport VLLM_USE_V1=1\n",
        # bodies GNU patch rejects, and one rooted at the repository's own overlay folder
        "container/patches/bad-header.diff": b"--- a/vllm/config/cache.py\n+++ b/vllm/config/cache.py\n@@ @@\n"
        + b" "
        + stock[CACHE].splitlines(keepends=True)[0]
        + b"+# x\n",
        "container/patches/bad-length.diff": b"--- a/vllm/config/cache.py\n+++ b/vllm/config/cache.py\n"
        b"@@ -1,5 +1,6 @@\n " + stock[CACHE].splitlines(keepends=True)[0] + b"+# x\n",
        "container/patches/stale.diff": _diff(
            b"not vllm's line\n" + stock[CACHE], b"not vllm's line\n# x\n" + stock[CACHE], f"a/{CACHE}", f"b/{CACHE}"
        ),
        "overlays/vllm/config/cache.py": _edit(stock[CACHE], 5, b"overlay: fp8 kv cache default"),
        "from-overlay.diff": _diff(
            stock[CACHE],
            _edit(stock[CACHE], 5, b"overlay: fp8 kv cache default"),
            "a/overlays/vllm/config/cache.py",
            "b/overlays/vllm/config/cache.py",
        ),
        "container/Dockerfile": "FROM nvcr.io/nvidia/pytorch:25.09-py3\nARG MAX_JOBS=4\nARG VLLM_REF=0f3a9b2c\n"
        "RUN git clone https://github.com/someone/vllm.git && cd vllm && git checkout ${VLLM_REF}\n"
        "RUN curl -L https://github.com/vllm-project/vllm/pull/31000.diff | git apply\n"
        "RUN python3 - <<'EOF'\nimport pathlib\n"
        f"p = pathlib.Path('/{SITE}vllm/platforms/interface.py')\n"
        "p.write_text(p.read_text().replace('sm_120', 'sm_121'))\nEOF\n",
        ".gitmodules": '[submodule "vllm"]\n\tpath = third_party/vllm\n\turl = https://github.com/someone/vllm.git\n',
        "README.md": "# my spark build\n",
        "docs/old.diff": _diff(stock[CACHE], stock[CACHE] + b"# doc\n", f"a/{CACHE}", f"b/{CACHE}"),
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data if isinstance(data, bytes) else data.encode())
    return root, want


def _ledger(run, d: Path, *init: str) -> Path:
    d.mkdir()
    assert run("init", *init, cwd=d).code == 0
    return d


def test_the_inventory_says_what_each_thing_becomes_and_writes_nothing(run, stock, tmp_path: Path) -> None:
    repo, _ = _repo(tmp_path / "spark-build", stock)
    led = _ledger(run, tmp_path / "led")
    before = tree_digest(led)
    r = run("import", repo, "--dry-run", "--json", cwd=led)
    assert r.code == 0, r
    assert tree_digest(led) == before  # nothing written
    inv = json.loads(r.stdout)
    by = {f["path"]: f for f in inv["findings"]}
    diffs = [f["path"] for f in inv["findings"] if f["kind"] == "diff" and f["imported"]]
    # a recipe's diffs in the script's order, re-rooted; the patch two levels down; all of vllm
    assert diffs == [
        "mods/gb10-cuda/fix.diff",
        "mods/kv-prefix/kv.patch",
        "container/patches/device.diff",
        "container/patches/stale.diff",  # without a base, its hunk cannot be checked
    ], diffs
    assert {by[p]["target"] for p in diffs} == {"vllm"} and inv["created"] == ["vllm"]
    assert "-p6 (vllm/platforms/cuda.py)" in by["mods/gb10-cuda/fix.diff"]["note"]
    assert "applied by mods/gb10-cuda/run.sh:4 (-p1 -d /)" in by["mods/gb10-cuda/fix.diff"]["note"]
    # every hotfix script is listed with what it is, none skipped without a word
    for name in ("hotfix-01-flags.sh", "hotfix-02-moe.py", "hotfix-03-env.sh"):
        assert by[f"container/patches/{name}"]["kind"] == "edit script" and by[f"container/patches/{name}"]["reason"]
    assert "--script" in by["container/patches/hotfix-02-moe.py"]["reason"]
    assert "neither applies a diff nor edits" in by["container/patches/hotfix-03-env.sh"]["reason"]
    # the bodies apply would refuse are refused, each with its reason
    refused = {f["path"]: f["reason"] for f in inv["findings"] if f["refused"]}
    assert set(refused) == {
        "container/patches/bad-header.diff",
        "container/patches/bad-length.diff",
        "from-overlay.diff",
    }, refused
    assert "own folder overlays/" in refused["from-overlay.diff"]
    assert inv["counts"]["refused"] == 3 and inv["counts"]["imported"] == 4
    kinds = {f["kind"] for f in inv["findings"]}
    assert {"recipe", "overlay", "Dockerfile RUN heredoc", "PR list", "submodule", "fork"} <= kinds, kinds
    pr = next(f for f in inv["findings"] if f["kind"] == "PR list")
    assert "1 upstream PR(s) (#31000)" in pr["reason"]  # ARG MAX_JOBS=4 is not PR 4
    sub = by["third_party/vllm"]
    assert "vllm fork" in sub["reason"] and "someone/vllm" in sub["reason"]
    assert not any(p.startswith(("docs/", "README")) for p in by)  # docs are not surveyed


def test_gnu_patch_agrees_on_which_bodies_are_malformed(stock, tmp_path: Path) -> None:
    if shutil.which("patch") is None:
        pytest.skip("GNU patch is not installed")
    repo, _ = _repo(tmp_path / "spark-build", stock)
    base = tmp_path / "base"
    for rel, data in stock.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_bytes(data)

    def gnu(diff: str, strip: int) -> int:
        body = (repo / diff).read_bytes()
        return subprocess.run(
            ["patch", "--dry-run", "-F0", f"-p{strip}", "-d", str(base)], input=body, capture_output=True
        ).returncode

    assert gnu("container/patches/bad-header.diff", 1) != 0
    assert gnu("container/patches/bad-length.diff", 1) != 0
    assert gnu("container/patches/stale.diff", 1) != 0
    assert gnu("mods/gb10-cuda/fix.diff", 6) == 0 and gnu("container/patches/device.diff", 1) == 0


def test_a_hunk_that_does_not_match_the_base_is_refused_with_base(run, stock, tmp_path: Path) -> None:
    repo, _ = _repo(tmp_path / "spark-build", stock)
    led = _ledger(run, tmp_path / "led", "--target", "vllm")
    r = run("import", repo, "--base", V30, "--dry-run", "--json", cwd=led)
    assert r.code == 0, r
    refused = {f["path"]: f["reason"] for f in json.loads(r.stdout)["findings"] if f["refused"]}
    assert "hunk #1 FAILED" in refused["container/patches/stale.diff"], refused
    assert "vllm/config/cache.py" in refused["container/patches/stale.diff"]
    # without the base it cannot be told
    r = run("import", repo, "--dry-run", "--json", cwd=led)
    refused = {f["path"] for f in json.loads(r.stdout)["findings"] if f["refused"]}
    assert "container/patches/stale.diff" not in refused


def test_import_writes_the_diffs_in_order_and_they_apply_byte_exact(run, stock, tmp_path: Path) -> None:
    repo, want = _repo(tmp_path / "spark-build", stock)
    led = _ledger(run, tmp_path / "led")
    r = run("import", repo, "--base", V30, cwd=led)
    assert r.code == 0, r
    assert "added 3" in r.stdout and "4 file(s) refused" in r.stdout, r.stdout  # stale.diff too, with the base
    assert "target vllm: created from its preset" in r.stdout
    ledger = load_ledger(led / "patches.toml")
    assert set(ledger.targets) == {"vllm"}  # never a target named after a folder (mods, container, patches)
    # the diffs in the recipes' order, then the overlay folder read against the base (one patch per file)
    assert [p.id for p in ledger.series("vllm")] == ["fix", "kv", "device", "overlay-vllm-config-cache.py"]
    assert ledger.targets["vllm"].base == V30
    r = run("list", "--json", cwd=led)
    rows = {row["id"]: row for row in json.loads(r.stdout)}
    assert rows["fix"]["files"] == [CUDA], rows["fix"]  # the stripped name of a -p6 patch, not usr/local/lib/...
    tree = tmp_path / "tree"
    r = run("apply", "--from-index", V30, "--into", tree, "--json", cwd=led)
    assert r.code == 0, r  # the lock is complete: no --update-lock
    for rel, data in want.items():
        assert (tree / rel).read_bytes() == data, rel
    assert (tree / CACHE).read_bytes() == (repo / "overlays" / CACHE).read_bytes()


def test_a_repository_without_a_change_writes_nothing_and_says_so(run, stock, tmp_path: Path) -> None:
    repo = tmp_path / "launcher"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts/serve.py").write_text("import subprocess\nsubprocess.run(['vllm', 'serve'])\n")
    (repo / "scripts/bench.sh").write_text("#!/bin/sh\ncurl localhost:8000/v1/models\n")
    (repo / "README.md").write_text("# launch vLLM on a Spark\n")
    led = _ledger(run, tmp_path / "led")
    before = tree_digest(led)
    r = run("import", repo, cwd=led)
    assert r.code == 2 and "no changes to vllm (or any target) found" in r.stderr, r
    assert "--overlay" not in r.stderr
    assert tree_digest(led) == before


EDIT = """import pathlib, sys
p = pathlib.Path(sys.argv[1])
t = p.read_text()
assert t.count("import torch\\n") == 1, "anchor"
p.write_text(t.replace("import torch\\n", "import torch  # sm_121\\n"))
"""


def test_diffs_mixed_with_overlay_and_script_imports_leave_a_complete_lock(run, stock, tmp_path: Path) -> None:
    """Issue 33, Why 6: a diff imported before an overlay and one after a script: the first apply
    exits 0 without --update-lock, every patched file checked against the lock."""
    repo, want = _repo(tmp_path / "spark-build", stock)
    led = _ledger(run, tmp_path / "led", "--target", "vllm")
    (led / "edit.py").write_text(EDIT)
    steps = [
        ("import", repo / "container/patches/device.diff", "--base", V30),
        ("import", "--overlay", repo / "overlays", "--target", "vllm", "--base", V30),
        ("import", "--script", "python3 edit.py {root}/" + CUDA, "--id", "cuda-edit", "--target", "vllm"),
        ("import", repo / "mods/kv-prefix/kv.patch"),
    ]
    for args in steps:
        r = run(*args, cwd=led)
        assert r.code == 0, r
    lock = load_ledger(led / "patches.toml").lock.targets["vllm"].files
    assert {DEVICE, KV, CACHE, CUDA} <= set(lock), sorted(lock)
    tree = tmp_path / "tree"
    r = run("apply", "--from-index", V30, "--into", tree, "--json", cwd=led)
    assert r.code == 0, r
    assert (tree / DEVICE).read_bytes() == want[DEVICE] and (tree / KV).read_bytes() == want[KV]
    assert (tree / CACHE).read_bytes() == (repo / "overlays" / CACHE).read_bytes()
    assert b"import torch  # sm_121\n" in (tree / CUDA).read_bytes()


def _spark_fork_repo(root: Path, stock: dict[str, bytes]) -> tuple[Path, dict[str, bytes], str]:
    """A second shape: diffs re-rooted three ways (a source checkout at /workspace/vllm, a venv's
    site-packages, names inside the package), a vLLM fork as a git submodule at a commit, a
    Dockerfile checking out a commit and listing PRs, a launcher script that changes nothing."""
    want = {
        DEVICE: _edit(stock[DEVICE], 6, b"spark: pin the device order"),
        KV: _edit(stock[KV], 2, b"spark: larger block table"),
        CUDA: _edit(stock[CUDA], 7, b"spark: GB10 capability 12.1"),
    }
    files = {
        "container/0001-device.patch": _diff(
            stock[DEVICE], want[DEVICE], f"/workspace/vllm/{DEVICE}", f"/workspace/vllm/{DEVICE}"
        ),
        "fixes/venv-kv.diff": _diff(
            stock[KV],
            want[KV],
            f"a/opt/venv/lib/python3.12/site-packages/{KV}",
            f"b/opt/venv/lib/python3.12/site-packages/{KV}",
        ),
        "fixes/inside-package.diff": _diff(stock[CUDA], want[CUDA], "a/platforms/cuda.py", "b/platforms/cuda.py"),
        "Dockerfile": 'FROM nvcr.io/nvidia/pytorch:25.09-py3\nARG PRS="31000 31001"\nARG MAX_JOBS=8\n'
        "RUN git clone https://github.com/someone/vllm.git /workspace/vllm && cd /workspace/vllm "
        "&& git checkout 1a2b3c4d5e6f\n",
        "scripts/launch.sh": '#!/bin/sh\nexec python -m vllm.entrypoints.openai.api_server "$@"\n',
        ".gitmodules": '[submodule "vllm"]\n\tpath = vllm-fork\n\turl = https://github.com/someone/vllm.git\n',
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data if isinstance(data, bytes) else data.encode())
    sha = "0123456789abcdef0123456789abcdef01234567"
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(root), "update-index", "--add", "--cacheinfo", f"160000,{sha},vllm-fork"], check=True
    )
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "x"],
        check=True,
    )
    return root, want, sha


def test_names_re_rooted_every_way_and_a_fork_at_its_commit(run, stock, tmp_path: Path) -> None:
    repo, want, sha = _spark_fork_repo(tmp_path / "spark-fork", stock)
    led = _ledger(run, tmp_path / "led")
    r = run("import", repo, "--base", V30, "--dry-run", "--json", cwd=led)
    assert r.code == 0, r
    by = {f["path"]: f for f in json.loads(r.stdout)["findings"]}
    assert "-p3 (vllm/config/device.py)" in by["container/0001-device.patch"]["note"]  # /workspace/vllm/
    assert "-p6 (vllm/v1/core/kv_cache_utils.py)" in by["fixes/venv-kv.diff"]["note"]  # a venv's site-packages
    assert "-p1 under vllm/ (vllm/platforms/cuda.py)" in by["fixes/inside-package.diff"]["note"]  # inside the package
    assert f"someone/vllm.git at {sha}" in by["vllm-fork"]["reason"]  # the submodule's commit, from git
    fork = next(f for f in by.values() if f["kind"] == "fork")
    assert "1a2b3c4d5e6f" in fork["reason"] and "someone/vllm.git" in fork["reason"]
    pr = next(f for f in by.values() if f["kind"] == "PR list")
    assert "2 upstream PR(s) (#31000, #31001)" in pr["reason"]
    assert "scripts/launch.sh" not in by  # a launcher is not a change
    r = run("import", repo, "--base", V30, cwd=led)
    assert r.code == 0 and "added 3" in r.stdout, r
    tree = tmp_path / "tree"
    r = run("apply", "--from-index", V30, "--into", tree, cwd=led)
    assert r.code == 0, r
    for rel, data in want.items():
        assert (tree / rel).read_bytes() == data, rel


def test_base_auto_records_the_newest_release_the_diffs_fit(run, stock, tmp_path: Path) -> None:
    repo, _ = _repo(tmp_path / "spark-build", stock)
    (repo / "container/patches/stale.diff").unlink()  # a diff of no release at all
    led = _ledger(run, tmp_path / "led")
    r = run("import", repo, "--base", "auto", "--json", cwd=led)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    fits = rep["base_search"]["fits"]
    assert "0.30.0" in fits and rep["base"] == f"vllm=={fits[0]}", rep["base_search"]
    assert load_ledger(led / "patches.toml").targets["vllm"].base == rep["base"]
    tree = tmp_path / "tree"
    r = run("apply", "--from-index", rep["base"], "--into", tree, cwd=led)
    assert r.code == 0, r


def test_import_file_with_base_refuses_a_hunk_that_does_not_match(run, stock, tmp_path: Path) -> None:
    """Issue 33: `import FILE --base` refused a stale hunk only at apply; now at import, in apply's words."""
    repo, _ = _repo(tmp_path / "spark-build", stock)
    led = _ledger(run, tmp_path / "led", "--target", "vllm")
    before = tree_digest(led)
    r = run("import", repo / "container/patches/stale.diff", "--base", V30, cwd=led)
    assert r.code == 2 and "hunk #1 FAILED" in r.stderr and f"{CACHE}:" in r.stderr, r
    assert "nothing was imported" in r.stderr and tree_digest(led) == before
    r = run("import", repo / "container/patches/device.diff", "--base", V30, cwd=led)
    assert r.code == 0, r


def test_a_build_repository_of_preset_folders_says_what_it_did_not_survey(run, stock, tmp_path: Path) -> None:
    """``patches/vllm/`` names what the repository carries: its folder is imported, and the
    Dockerfile, recipe and overlay beside it are named as not surveyed, not passed over in silence."""
    repo, want = _repo(tmp_path / "spark-build", stock)
    (repo / "from-overlay.diff").unlink()  # a diff at the top would make it a patch folder
    (repo / "patches/vllm").mkdir(parents=True)
    shutil.copy(repo / "container/patches/device.diff", repo / "patches/vllm/0001-device.patch")
    led = _ledger(run, tmp_path / "led", "--target", "vllm")
    r = run("import", repo, "--json", cwd=led)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert list(rep["folders"]) == ["vllm"], rep
    assert rep["added"] == ["0001-device"], rep
    skipped = set(rep["not_surveyed"])
    assert {"container/Dockerfile", "mods/gb10-cuda/run.sh", "overlays/vllm/config/cache.py"} <= skipped, skipped
    assert not any(p.startswith("patches/vllm/") for p in skipped) and "README.md" not in skipped
    r = run("import", repo, cwd=led)
    assert f"not surveyed: {len(skipped)} file(s) beside the target folders" in r.stdout, r
    assert f"patchset import {repo} --dry-run" in r.stdout
    tree = tmp_path / "tree"
    assert run("apply", "--from-index", V30, "--into", tree, cwd=led).code == 0
    assert (tree / DEVICE).read_bytes() == want[DEVICE]
