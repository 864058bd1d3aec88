"""The gate when it is red (issue #27, item 3): the newest upstream commit the whole series still
carries onto (and passes on), with the one command that rebases there; the judged commit's image
for `--build overlay` (or a refusal that says why); and a re-run on unchanged upstream that keeps
the last verdict's artifacts and says "unchanged since <run>: red"."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from patchset.ci.gate import GateRun, run_gate
from patchset.rebase.session import RebaseRun, rebase
from patchset.upstream.nightly import image_for
from tests.support.gateworld import CORE, UTIL, build_upstream, gate_ledger, transient_upstream
from tests.support.repo import commit_files, git


def _files(art: Path) -> dict[str, bytes]:
    return {str(p.relative_to(art)): p.read_bytes() for p in sorted(art.rglob("*")) if p.is_file()}


# ---- the newest safe upstream ----------------------------------------------------------------


def test_red_names_the_newest_safe_commit_and_its_command_works(tmp_path: Path, upstream) -> None:
    repo, c = upstream  # B breaks at c4 (#104); A is upstream from c2
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    r = run_gate(GateRun(ledger, latest=True, artifacts=tmp_path / "art", tags=["cpu"]))
    assert (r.status, r.conflicts) == ("red", ["B"])
    safe = r.newest_safe
    assert safe["commit"]["sha"] == c[3] and safe["label"] == c[3], safe
    assert safe["passed"] is True and {t["name"] for t in safe["test_results"]} == {
        "core-patched"
    }  # A is upstream there
    argv = shlex.split(safe["command"])
    assert argv[:2] == ["patchset", "--ledger"] and argv[3:] == [
        "rebase", "--target", "demo", "--onto", c[3], "--upstream", str(repo)
    ]  # fmt: skip
    md = (tmp_path / "art/report.md").read_text()
    assert "## Newest safe upstream" in md and safe["command"] in md
    assert (tmp_path / "art/logs/newest-safe/rebase.json").is_file()  # its own logs, beside the run's
    # the command does what it says: the series carries there (every patch), and nothing conflicts
    rep = rebase(RebaseRun(Path(argv[2]), c[3], target="demo", repo=repo, dry_run=True))
    assert rep.ok and {p.id: p.verdict for p in rep.patches} == {"A": "already-upstream", "B": "carried"}


def test_a_patch_that_broke_and_healed_pushes_the_safe_commit_below_it(tmp_path: Path) -> None:
    repo, c = transient_upstream(tmp_path / "up")
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    r = run_gate(GateRun(ledger, onto=c[6], artifacts=tmp_path / "art"))
    assert (r.status, r.conflicts) == ("red", ["B"])  # A carries onto the judged commit
    assert r.first_bad["B"]["commit"]["sha"] == c[5]
    safe = r.newest_safe
    assert safe["commit"]["sha"] == c[2], safe  # c4 (below B's first bad) breaks A: its first bad is c3
    assert "tests" not in safe  # no tags: replayed, not tested
    assert f"--onto {c[2]}" in safe["command"]
    for sha in (c[3], c[4]):
        assert not rebase(RebaseRun(ledger, sha, target="demo", repo=repo, dry_run=True)).ok
    assert rebase(RebaseRun(ledger, c[2], target="demo", repo=repo, dry_run=True)).ok


def test_nothing_newer_than_the_base_carries(tmp_path: Path) -> None:
    (tmp_path / "up").mkdir()
    repo, c = build_upstream(tmp_path / "up")
    ledger = gate_ledger(tmp_path / "proj", repo, c[3])
    r = run_gate(GateRun(ledger, onto=c[4], artifacts=tmp_path / "art"))
    assert r.status == "red" and r.newest_safe["commit"] is None and r.newest_safe["command"] == ""
    assert "stay on the base" in r.newest_safe["why"]


# ---- unchanged upstream keeps the verdict -----------------------------------------------------


def test_an_unchanged_rerun_keeps_the_red_verdicts_artifacts(tmp_path: Path, upstream) -> None:
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    art = tmp_path / "art"
    r = run_gate(GateRun(ledger, latest=True, artifacts=art))
    assert r.status == "red" and r.judged_at
    red = _files(art)
    assert {"junit.xml", "series.patch", "logs/gate.log", "logs/rebase.json"} <= set(red)
    for _ in range(2):  # twice: an unchanged run keeps what the first unchanged run kept
        r2 = run_gate(GateRun(ledger, latest=True, artifacts=art))
        assert (r2.status, r2.exit_code) == ("unchanged", 0)
        now = _files(art)
        for name in ("junit.xml", "series.patch", "logs/gate.log", "logs/rebase.json"):
            assert now[name] == red[name], name
        md = now["report.md"].decode()
        assert f"unchanged since the run of {r.judged_at}: red" in md
        assert "first bad upstream commit" in md and "exit code: 0 (unchanged)" not in md
        doc = json.loads(now["report.json"])
        assert doc["status"] == "unchanged" and doc["verdict_report"]["status"] == "red"
        assert doc["verdict_report"]["newest_safe"]["commit"]["sha"] == c[3]


def test_artifacts_of_another_run_are_not_kept_as_the_verdicts(tmp_path: Path, upstream) -> None:
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    art = tmp_path / "art"
    run_gate(GateRun(ledger, latest=True, artifacts=art))
    doc = json.loads((art / "report.json").read_text())
    doc["judged_at"] = "1999-01-01T00:00:00Z"  # another run's report
    (art / "report.json").write_text(json.dumps(doc))
    r = run_gate(GateRun(ledger, latest=True, artifacts=art))
    assert r.status == "unchanged" and r.verdict_report == {}
    assert not (art / "junit.xml").exists() and not (art / "series.patch").exists() and not (art / "logs").exists()
    assert "unchanged since the run of" in (art / "report.md").read_text()


# ---- the judged commit's image -----------------------------------------------------------------

INSTALLED = 'installed_root = "/usr/lib/python3/dist-packages"\n'


def _image_ledger(root: Path, repo: Path, base: str, image: str) -> Path:
    ledger = gate_ledger(root, repo, base)
    text = ledger.read_text().replace("[targets.demo]\n", f'[targets.demo]\n{INSTALLED}base_image = "{image}"\n', 1)
    ledger.write_text(text)
    subprocess.run(["git", "-C", str(root), "commit", "-qam", "image"], check=True)
    return ledger


def test_build_overlay_uses_the_judged_commits_image(tmp_path: Path, upstream) -> None:
    repo, c = upstream
    ledger = _image_ledger(tmp_path / "proj", repo, c[0], f"example.invalid/demo:cu130-nightly-{c[0]}")
    art = tmp_path / "art"
    r = run_gate(GateRun(ledger, onto=c[3], artifacts=art, build=["overlay"]))
    assert r.status == "green", r.to_json()
    assert r.image == {
        "base_image": f"example.invalid/demo:cu130-nightly-{c[0]}",
        "image": f"example.invalid/demo:cu130-nightly-{c[3]}",
        "why": "",
    }
    dockerfile = (art / "image/Dockerfile").read_text()
    assert f"FROM example.invalid/demo:cu130-nightly-{c[3]}\n" in dockerfile
    assert (art / "image/overlay/usr/lib/python3/dist-packages/pkg/core.py").is_file()
    assert not (art / "image/overlay/overlay").exists() and not (art / "overlay").exists()
    # the refreshed series records the new image with the new base
    assert f'+base_image = "example.invalid/demo:cu130-nightly-{c[3]}"' in (art / "series.patch").read_text()
    # red by a conflict: the image it would take is reported, but the series is not refreshed
    r = run_gate(GateRun(ledger, onto=c[9], artifacts=art))
    assert (r.status, r.image["image"]) == ("red", f"example.invalid/demo:cu130-nightly-{c[9]}")
    assert "base_image" not in (art / "series.patch").read_text()


def test_build_overlay_refuses_an_image_it_cannot_derive(tmp_path: Path, upstream) -> None:
    repo, c = upstream
    ledger = _image_ledger(tmp_path / "proj", repo, c[0], "example.invalid/demo:latest")
    art = tmp_path / "art"
    r = run_gate(GateRun(ledger, onto=c[3], artifacts=art, build=["overlay"]))
    assert (r.status, r.exit_code) == ("error", 2)
    assert "does not name the base" in r.errors[0] and "--base-image" in r.errors[0]
    assert not (art / "image").exists()
    # without --build overlay the gate is green, and says the image is left as it was
    r = run_gate(GateRun(ledger, onto=c[3], artifacts=art, force=True))
    assert r.status == "green" and any("base_image left as it is" in w for w in r.warnings)


def test_build_wheel_refuses_a_git_upstream(tmp_path: Path, upstream) -> None:
    repo, c = upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    art = tmp_path / "art"
    r = run_gate(GateRun(ledger, onto=c[3], artifacts=art, build=["wheel"]))
    assert (r.status, r.exit_code, r.apply["outcome"]) == ("error", 2, "applied")  # applied, then refused
    assert "--build wheel needs a release" in r.errors[0] and "--onto PROJECT==VERSION" in r.errors[0]
    assert r.build == {} and not (art / "dist").exists()


def test_a_release_base_image_moves_to_the_judged_release(tmp_path: Path) -> None:
    from tests.support.repo import new_repo

    repo = tmp_path / "up"
    new_repo(repo, {"pkg/core.py": CORE, "pkg/util.py": UTIL})
    git(repo, "tag", "v1.0")
    commit_files(repo, "Docs (#2)", {"README": "x\n"})
    git(repo, "tag", "v1.1")
    ledger = _image_ledger(tmp_path / "proj", repo, "v1.0", "example.invalid/demo:v1.0")
    art = tmp_path / "art"
    r = run_gate(GateRun(ledger, onto="v1.1", artifacts=art, build=["overlay"]))
    assert r.status == "green", r.to_json()
    assert "FROM example.invalid/demo:v1.1\n" in (art / "image/Dockerfile").read_text()


SHA0, SHA1 = "7f1a5398e9610d96c473931a26c0e12bbe0d0423", "2f3f441f8" + "0" * 31


@pytest.mark.parametrize(
    "image, base, base_version, version, commit, want",
    [
        (f"vllm/vllm-openai:nightly-{SHA0}", SHA0, "0.30.1rc1.dev48", "", SHA1, f"vllm/vllm-openai:nightly-{SHA1}"),
        ("vllm/vllm-openai:v0.30.0", "vllm==0.30.0", "0.30.0", "0.31.0", SHA1, "vllm/vllm-openai:v0.31.0"),
        ("registry:5000/vllm:0.30.0", "0.30.0", "0.30.0", "0.31.0", SHA1, "registry:5000/vllm:0.31.0"),
        ("vllm/vllm-openai:v0.30.0", "vllm==0.30.0", "0.30.0", "0.30.0", SHA1, "vllm/vllm-openai:v0.30.0"),
        (f"vllm/vllm-openai:nightly-{SHA0}", SHA0, "", "", SHA0, f"vllm/vllm-openai:nightly-{SHA0}"),
        (f"vllm/vllm-openai:nightly-{SHA0}", SHA0, "", "0.31.0", SHA1, None),  # a release has no nightly tag
        ("vllm/vllm-openai:v0.30.0", "0.30.0", "0.30.0", "", SHA1, None),  # a commit between releases
        ("vllm/vllm-openai:nightly", SHA0, "", "", SHA1, None),  # moving tag
        (f"vllm/vllm-openai@sha256:{'a' * 64}", SHA0, "", "", SHA1, None),  # a digest
        (f"vllm/vllm-openai:nightly-{SHA1}", SHA0, "", "", SHA1, None),  # names another commit than the base
        ("", SHA0, "", "", SHA1, None),
    ],
)
def test_image_for(image, base, base_version, version, commit, want) -> None:
    base_commit = base if len(base) == 40 else ""
    got, why = image_for(
        image, base=base, base_version=base_version, base_commit=base_commit, version=version, commit=commit
    )
    assert (got or None) == want, why
    assert bool(why) == (want is None)
