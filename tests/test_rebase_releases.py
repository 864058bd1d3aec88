"""Proof on real vLLM releases: a series written for vLLM 0.30.0, rebased onto 0.31.0, 0.32.0, 0.33.0.

The releases come from the package index through ``patchset.upstream.history`` (cached in
``$PATCHSET_CACHE``). The series is written here, against the real 0.30.0 source, so that each
class meets real upstream drift:

* ``clean``: a comment in ``vllm/v1/core/kv_cache_metrics.py`` (a file no release touches);
* ``merge``: a line after ``model_config = ...`` in ``vllm/platforms/cuda.py``, where 0.31.0
  removed the PCP check one blank line below (zero-fuzz apply fails, the 3-way merge is clean);
* ``moved``: a comment in ``vllm/models/glm5next/nvidia/kda.py``, which 0.31.0 moved to
  ``common/``;
* ``backport``: the real 0.30.0 -> 0.31.0 change of ``vllm/config/device.py``, applied to 0.30.0;
* ``port``: our own wording of the docstring change 0.31.0 made in ``vllm/config/model_arch.py``,
  linked (``upstream.ports``) to the upstream change, whose merge the ledger records as the 0.31.0
  commit of the release history;
* ``conflict``: ``from functools import partial, lru_cache`` in ``vllm/v1/core/kv_cache_utils.py``,
  where 0.31.0 wrote ``partial, reduce``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from patchset.engine.hunks import apply_file
from patchset.ledger.store import load_ledger
from patchset.patchfmt.diffs import parse_patch
from patchset.rebase.session import RebaseRun, rebase
from patchset.upstream import releases
from patchset.upstream.archives import unpack
from patchset.upstream.history import ReleaseHistory
from tests.support.repo import release_history
from tests.support.text import edit, udiff
from tests.support.vllm_ledger import patch_entry, vllm_target

pytestmark = pytest.mark.network

VERSIONS = ["0.30.0", "0.31.0", "0.32.0", "0.33.0"]
PORTED_PR = "vllm-project/vllm#31000"  # stands for the upstream PR that landed in 0.31.0

EXPECTED = {
    "clean": ("carried", "clean"),
    "merge": ("carried", "merged"),
    "moved": ("carried", "moved"),
    "backport": ("already-upstream", ""),
    "port": ("superseded", ""),
    "conflict": ("conflict", ""),
}
FILES = {
    "clean": "vllm/v1/core/kv_cache_metrics.py",
    "merge": "vllm/platforms/cuda.py",
    "moved": "vllm/models/glm5next/nvidia/kda.py",
    "backport": "vllm/config/device.py",
    "port": "vllm/config/model_arch.py",
    "conflict": "vllm/v1/core/kv_cache_utils.py",
}


@pytest.fixture(scope="module")
def history() -> ReleaseHistory:
    return release_history("vllm", VERSIONS)


def _bodies(h: ReleaseHistory) -> dict[str, bytes]:
    v30 = h.resolve("vllm==0.30.0")

    def src(name: str) -> str:
        data = h.read_blob(v30, FILES[name])
        assert data is not None, FILES[name]
        return data.decode()

    def mk(name: str, old: str, new: str) -> bytes:
        text = src(name)
        return (
            f"Subject: [PATCH] {name}\n\nWritten for vLLM 0.30.0 by the rebase test.\n\n"
            + udiff(FILES[name], text, edit(text, old, new))
        ).encode()

    backport = h.git("diff", "--no-color", v30, h.resolve("vllm==0.31.0"), "--", FILES["backport"]).stdout
    assert backport.count(b"\n@@ ") >= 1
    return {
        "clean": mk(
            "clean",
            "        self.access_history: deque[int] = deque(maxlen=4)\n",
            "        self.access_history: deque[int] = deque(maxlen=4)\n"
            "        # patchset: a downstream note that upstream never touches\n",
        ),
        "merge": mk(
            "merge",
            "        model_config = vllm_config.model_config\n\n        if (\n",
            "        model_config = vllm_config.model_config\n"
            "        # patchset: GB10 (SM12x) guard goes here\n\n        if (\n",
        ),
        "moved": mk(
            "moved",
            "        # doesn't allow to override it\n",
            "        # doesn't allow to override it\n        # patchset: conv weights stay float32 on SM12x\n",
        ),
        "backport": b"Subject: [PATCH] backport\n\nBackport of the 0.31.0 change.\n\n" + backport,
        "port": mk(
            "port",
            '    """\n    Configuration for model architecture that required by vLLM runtime\n    """\n',
            '    """Configuration of the model architecture the vLLM runtime requires."""\n',
        ),
        "conflict": mk("conflict", "from functools import partial\n", "from functools import partial, lru_cache\n"),
    }


def _ledger(root: Path, h: ReleaseHistory, names: list[str]) -> Path:
    series = root / "patchset" / "series" / "vllm"
    series.mkdir(parents=True)
    v31 = h.resolve("vllm==0.31.0")
    lines = vllm_target()
    for name, data in _bodies(h).items():
        if name not in names:
            continue
        (series / f"{name}.patch").write_bytes(data)
        origin = {"backport": "upstream", "port": "port"}.get(name, "ours")
        lines += patch_entry(name, FILES[name], origin)
        if name == "port":
            lines += [
                "[patch.upstream]",
                f'ports = ["{PORTED_PR}"]',
                "[patch.status]",
                'pr_state = "merged"',
                f'merge_commit = "{v31}"',
            ]
        lines.append("")
    path = root / "patches.toml"
    path.write_text("\n".join(lines))
    return path


@pytest.mark.parametrize("version", ["0.31.0", "0.32.0", "0.33.0"])
def test_series_from_0_30_classified_on_each_release(history, tmp_path, version):
    ledger = _ledger(tmp_path, history, list(EXPECTED))
    report = rebase(RebaseRun(ledger, f"vllm=={version}", dry_run=True))
    assert {p.id: (p.verdict, p.how) for p in report.patches} == EXPECTED
    moved = report.get("moved").files[0]
    assert moved.new_path == "vllm/models/glm5next/common/kda.py" and moved.moved_from == FILES["moved"]
    assert not report.get("moved").warnings  # one clear move target
    backport = {e["name"] for e in report.get("backport").evidence}
    assert {"patch-id", "reverse-apply", "empty-replay"} <= backport
    port = report.get("port").evidence[0]
    assert port["name"] == "port-merged" and PORTED_PR in port["detail"]
    [conflict] = report.get("conflict").files
    assert conflict.how == "conflict"
    release_commits = {history.resolve(f"vllm=={v}") for v in VERSIONS[1:] if v <= version}
    blamed = {c["sha"] for h in conflict.hunks for c in h.commits}
    assert blamed and blamed <= release_commits
    if version == "0.31.0":
        assert blamed == {history.resolve("vllm==0.31.0")}


def test_port_without_its_link_is_a_conflict(history, tmp_path):
    """The port's text differs from upstream's: only the ledger's link makes it droppable."""
    ledger = _ledger(tmp_path, history, ["port"])
    text = ledger.read_text()
    ledger.write_text(text[: text.index("[patch.upstream]")])
    report = rebase(RebaseRun(ledger, "vllm==0.31.0", dry_run=True))
    assert report.get("port").verdict == "conflict"


def test_rebase_onto_0_31_writes_a_series_that_applies(history, tmp_path):
    names = [n for n in EXPECTED if n != "conflict"]
    ledger = _ledger(tmp_path, history, names)
    rebase(RebaseRun(ledger, "vllm==0.31.0", dry_run=True))  # warm the blob reads once, as a second run would be
    t0 = time.monotonic()
    report = rebase(RebaseRun(ledger, "vllm==0.31.0"))
    elapsed = time.monotonic() - t0
    assert report.status == "done" and report.written
    assert elapsed < 10  # the benchmark holds the real budget (3 s for ~15 patches); this catches regressions
    led = load_ledger(ledger)
    assert led.targets["vllm"].base == "vllm==0.31.0" and led.targets["vllm"].base_version == "0.31.0"
    assert {p.id: p.state for p in led.patches} == {
        "clean": "active",
        "merge": "active",
        "moved": "active",
        "backport": "dropped",
        "port": "dropped",
    }
    assert led.get("moved").files == ["vllm/models/glm5next/common/kda.py"]
    v31 = history.resolve("vllm==0.31.0")
    for p in led.series("vllm"):
        for fp in parse_patch(led.body_file(p).read_bytes(), 1):
            out = apply_file(history.read_blob(v31, fp.path), fp)
            assert out.ok and all(h.status == "clean" for h in out.hunks), (p.id, out.message)


def test_plain_directories_of_real_releases(history, tmp_path):
    """The same series on unpacked 0.30.0 and 0.31.0 trees (no git): a throwaway history is made."""
    trees = {}
    for v in ("0.30.0", "0.31.0"):
        trees[v] = tmp_path / f"vllm-{v}"
        unpack(releases.download(f"vllm=={v}"), trees[v])
    ledger = _ledger(tmp_path / "led", history, list(EXPECTED))
    ledger.write_text(ledger.read_text().replace('base = "vllm==0.30.0"', f'base = "{trees["0.30.0"]}"'))
    t0 = time.monotonic()
    report = rebase(RebaseRun(ledger, str(trees["0.31.0"]), dry_run=True))
    assert time.monotonic() - t0 < 10  # only the touched and the added/removed files are imported
    got = {p.id: (p.verdict, p.how) for p in report.patches}
    # the port's recorded merge commit lives in the release history, not in the throwaway one
    assert got == {**EXPECTED, "port": ("conflict", "")}
    notes = [e["detail"] for e in report.get("port").evidence if not e["decisive"]]
    assert any("not in the local upstream history" in n for n in notes)
    assert report.get("moved").files[0].new_path == "vllm/models/glm5next/common/kda.py"
