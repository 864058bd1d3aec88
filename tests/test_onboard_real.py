"""Onboarding on material no one here wrote: real vLLM releases from the package index (issue #25).

* overlays made of vLLM 0.31.0 files laid over 0.30.0: each patch is upstream's own change, and
  rebasing onto 0.31.0 reports every one as already upstream;
* an overlay kit of 20 downstream-edited 0.30.0 files that 0.31.0 changed, rebased onto 0.31.0
  and held against ``git merge-file`` (ours = 0.31.0, base = 0.30.0, theirs = the overlay): where
  merge-file merges cleanly the rebased patch must give exactly its result, where it conflicts the
  rebase must name a conflict;

The releases come through ``tests.support.repo.release_history`` (downloaded once into the cache,
skipped with the reason when the index is unreachable).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from patchset.engine.hunks import apply_file
from patchset.ledger.store import load_ledger
from patchset.patchfmt.diffs import parse_patch
from tests.support.repo import release_history

pytestmark = pytest.mark.network

V30, V31 = "vllm==0.30.0", "vllm==0.31.0"
UPSTREAM_FILES = ["vllm/config/device.py", "vllm/platforms/cuda.py", "vllm/v1/core/kv_cache_utils.py"]


@pytest.fixture(scope="module")
def history():
    return release_history("vllm", ["0.30.0", "0.31.0"])


def _kit(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def _changed_lines(diff: bytes) -> list[bytes]:
    return [ln for ln in diff.splitlines() if ln[:1] in (b"+", b"-") and not ln.startswith((b"+++", b"---"))]


def test_an_overlay_of_the_next_release_is_upstreams_change_and_rebases_as_already_upstream(
    run, history, tmp_path: Path
) -> None:
    c30, c31 = history.resolve(V30), history.resolve(V31)
    kit = _kit(tmp_path / "kit", {p: history.read_blob(c31, p) for p in UPSTREAM_FILES})
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = run("import", "--overlay", kit, "--target", "vllm", "--base", V30, "--json", cwd=led)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert rep["counts"]["files"] == 3 and rep["base"] == {"vllm": V30}
    ledger = load_ledger(led / "patches.toml")
    assert ledger.targets["vllm"].base == V30
    for p in ledger.patches:
        body = ledger.body_file(p).read_bytes()
        (path,) = p.files
        upstream = history.git("diff", "--no-color", c30, c31, "--", path).stdout
        assert _changed_lines(body) == _changed_lines(upstream), path  # upstream's own change
        (fp,) = parse_patch(body, 1)
        assert apply_file(history.read_blob(c30, path), fp).new == history.read_blob(c31, path)
    r = run("rebase", "--onto", V31, "--dry-run", "--json", cwd=led)
    assert r.code == 0, r
    verdicts = {p["id"]: p["verdict"] for p in json.loads(r.stdout)["patches"]}
    assert set(verdicts.values()) == {"already-upstream"}, verdicts


def _edited(data: bytes, path: str) -> bytes:
    """A downstream change: a comment line a third of the way down, indented like its neighbour."""
    lines = data.splitlines(keepends=True)
    k = len(lines) // 3
    while k < len(lines) - 1 and not lines[k].strip():
        k += 1
    indent = lines[k][: len(lines[k]) - len(lines[k].lstrip())].rstrip(b"\r\n")
    return b"".join([*lines[: k + 1], indent + f"# downstream overlay change to {path}\n".encode(), *lines[k + 1 :]])


def _merge_file(tmp: Path, ours: bytes, base: bytes, theirs: bytes) -> tuple[bytes, int]:
    tmp.mkdir(exist_ok=True)
    for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
        (tmp / name).write_bytes(data)
    p = subprocess.run(
        ["git", "merge-file", "-p", *(str(tmp / n) for n in ("ours", "base", "theirs"))], capture_output=True
    )
    return p.stdout, p.returncode


def test_a_kit_of_twenty_overlays_rebased_onto_the_next_release_agrees_with_git_merge_file(
    run, history, tmp_path: Path
) -> None:
    c30, c31 = history.resolve(V30), history.resolve(V31)
    names = history.git("diff", "--name-only", "--diff-filter=M", c30, c31, "--", "vllm/*.py").stdout.decode().split()
    assert len(names) >= 20
    step = len(names) // 20
    chosen = names[::step][:20]
    overlays = {p: _edited(history.read_blob(c30, p), p) for p in chosen}
    kit = _kit(tmp_path / "kit", overlays)
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = run("import", "--overlay", kit, "--target", "vllm", "--base", V30, "--json", cwd=led)
    assert r.code == 0, r
    assert json.loads(r.stdout)["counts"]["patches"] == 20
    r = run("rebase", "--onto", V31, "--dry-run", "--json", cwd=led)
    rep = json.loads(r.stdout)
    verdict = {p["id"]: p["verdict"] for p in rep["patches"]}
    ledger = load_ledger(led / "patches.toml")
    file_of = {p.id: p.files[0] for p in ledger.patches}
    oracle = {}
    for pid, path in file_of.items():
        oracle[pid] = _merge_file(
            tmp_path / "m", history.read_blob(c31, path), history.read_blob(c30, path), overlays[path]
        )
    clean = {pid for pid, (_, rc) in oracle.items() if rc == 0}
    # where merge-file conflicts the rebase names a conflict; where it merges, the rebase carries
    for pid in file_of:
        assert verdict[pid] == ("carried" if pid in clean else "conflict"), (pid, verdict[pid], oracle[pid][1])
    # the carried bodies, written by a real rebase (the conflicts held), give merge-file's files
    text = (led / "patches.toml").read_text()
    for pid in set(file_of) - clean:
        text = text.replace(f'id = "{pid}"\n', f'id = "{pid}"\nstate = "held"\nreason = "conflicts on 0.31.0"\n')
    (led / "patches.toml").write_text(text)
    r = run("rebase", "--onto", V31, cwd=led)
    assert r.code == 0, r
    ledger = load_ledger(led / "patches.toml")
    agree = 0
    for p in ledger.series("vllm"):
        (fp,) = parse_patch(ledger.body_file(p).read_bytes(), 1)
        got = apply_file(history.read_blob(c31, p.files[0]), fp)
        assert got.ok and got.new == oracle[p.id][0], p.id
        agree += 1
    counts = {
        "files": len(file_of),
        "patches": len(file_of),
        "carried": sum(v == "carried" for v in verdict.values()),
        "conflicts": sum(v == "conflict" for v in verdict.values()),
        "agree_with_merge_file": agree + len(set(file_of) - clean),
    }
    print("overlay kit on 0.31.0:", json.dumps(counts))
    assert counts["agree_with_merge_file"] == counts["files"]


ANCHOR_SCRIPT = """\
import codecs, sys
from pathlib import Path

path, old, new = sys.argv[1], *(codecs.decode(a, "unicode_escape") for a in sys.argv[2:4])
text = Path(path).read_text()
if text.count(old) != 1:
    sys.exit(f"anchor_edit: the anchor {old!r} occurs {text.count(old)} times in {path}, not once")
Path(path).write_text(text.replace(old, new))
"""
SCRIPTS = {  # id: (file, anchor, replacement) on vLLM 0.30.0
    "metrics-note": (
        "vllm/v1/core/kv_cache_metrics.py",
        r"        self.access_history: deque[int] = deque(maxlen=4)\n",
        r"        self.access_history: deque[int] = deque(maxlen=4)\n        # downstream: a note\n",
    ),
    "cuda-guard": (
        "vllm/platforms/cuda.py",
        r"        model_config = vllm_config.model_config\n",
        r"        model_config = vllm_config.model_config\n        # downstream: GB10 (SM12x) guard\n",
    ),
    "lru-import": (
        "vllm/v1/core/kv_cache_utils.py",
        r"from functools import partial\n",
        r"from functools import lru_cache, partial\n",
    ),
}


def test_edit_scripts_anchored_on_real_vllm_files_regenerate_on_the_next_release(run, history, tmp_path: Path) -> None:
    """On 0.31.0: an untouched file gives the same diff (carried), a file changed near the anchor
    a refreshed one, a file whose anchor line changed a conflict carrying the script's message."""
    c30, c31 = history.resolve(V30), history.resolve(V31)
    script = tmp_path / "anchor_edit.py"
    script.write_text(ANCHOR_SCRIPT)
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    for pid, (path, old, new) in SCRIPTS.items():
        cmd = f"python3 {script} {{root}}/{path} '{old}' '{new}'"
        r = run("import", "--script", cmd, "--id", pid, "--target", "vllm", "--base", V30, "--json", cwd=led)
        assert r.code == 0, r
        assert json.loads(r.stdout)["files"] == [path]
    ledger = load_ledger(led / "patches.toml")
    for p in ledger.patches:  # each body is the script's edit of the real 0.30.0 file
        (fp,) = parse_patch(ledger.body_file(p).read_bytes(), 1)
        path, old, new = SCRIPTS[p.id]
        stock = history.read_blob(c30, path).decode()
        want = stock.replace(old.encode().decode("unicode_escape"), new.encode().decode("unicode_escape"))
        assert apply_file(stock.encode(), fp).new == want.encode(), p.id
    r = run("rebase", "--onto", V31, "--dry-run", "--json", cwd=led)
    got = {p["id"]: (p["verdict"], p["how"]) for p in json.loads(r.stdout)["patches"]}
    assert history.read_blob(c30, SCRIPTS["metrics-note"][0]) == history.read_blob(c31, SCRIPTS["metrics-note"][0])
    assert got == {
        "metrics-note": ("carried", "regenerated"),
        "cuda-guard": ("carried", "refreshed"),
        "lru-import": ("conflict", ""),
    }, got
    conflict = next(p for p in json.loads(r.stdout)["patches"] if p["id"] == "lru-import")
    assert (
        "anchor_edit: the anchor 'from functools import partial\\n' occurs 0 times" in conflict["files"][0]["message"]
    )


ROOT_STYLES = {  # id: (the real file, how the diff names it, the reading import must infer)
    "git-style": ("vllm/v1/core/kv_cache_metrics.py", "a/{p}", None),
    "p0": ("vllm/config/device.py", "{p}", "-p0"),
    "abs-prefix": ("vllm/platforms/cuda.py", "a/usr/local/lib/python3.12/dist-packages/{p}", "-p6"),
    "in-package": ("vllm/v1/attention/backends/flash_attn.py", "b/{rel}", "-p1 under vllm/"),
}


def test_each_diff_root_style_is_read_against_the_real_sdist(run, history, tmp_path: Path) -> None:
    import difflib

    c30 = history.resolve(V30)
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    assert run("target", "set", "vllm", "--base", V30, cwd=led).code == 0
    want = {}
    for pid, (path, spelling, reading) in ROOT_STYLES.items():
        old = history.read_blob(c30, path)
        new = _edited(old, path)
        want[pid] = (path, old, new)
        name = spelling.format(p=path, rel=path.removeprefix("vllm/"))
        other = name.replace("a/", "b/", 1) if name.startswith("a/") else name
        text = "".join(difflib.unified_diff(old.decode().splitlines(True), new.decode().splitlines(True), name, other))
        (tmp_path / f"{pid}.patch").write_text(text)
        r = run("import", tmp_path / f"{pid}.patch", "--json", cwd=led)
        assert r.code == 0, r
        inferred = json.loads(r.stdout)["inferred"]
        if reading is None:
            assert inferred == {}, inferred  # the target's own reading fits: nothing to say
        else:
            assert inferred[pid].startswith(f"{reading} (vllm/") and "fits the base's files" in inferred[pid], inferred
    ledger = load_ledger(led / "patches.toml")
    for p in ledger.patches:
        path, old, new = want[p.id]
        strip = p.source.strip if p.source.strip is not None else 1
        (fp,) = parse_patch(ledger.body_file(p).read_bytes(), strip)
        assert fp.path == path and apply_file(old, fp).new == new, p.id
