"""The ledger: the real production ledger validates; every malformed case names file, line, key."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from patchset.ledger.store import load_ledger


def test_real_ledger_counts(run, real_ledger: Path) -> None:
    r = run("validate", "--json", cwd=real_ledger)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert rep["counts"]["vllm"] == {"active": 18, "held": 1, "dropped": 1}
    assert rep["counts"]["flashinfer"] == {"active": 2}
    assert rep["counts"]["nccl"] == {"active": 1}
    assert set(rep["bodies"].values()) == {"not imported"}
    assert len(rep["bodies"]) == 23
    # order of the five patches on common/model.py is recorded
    assert rep["shared_files"]["vllm:vllm/models/glm5next/common/model.py"] == [
        "04-glm5next-model-nvfp4-eagle3",
        "09-glm5next-kda-honor-mamba-ssm-cache-dtype",
        "p2-mla-fused-qkv-a-w8a16",
        "p4-glm5next-fp8-attn-helper-nvfp4-scales",
        "u58834-glm5next-non-mhc-sp-decoder-layout",
    ]
    assert rep["switches"]["10-dflash2-drafter-w8a16"]["env"] == {"VLLM_DRAFTER_W8A16": "1"}


def test_real_ledger_model() -> None:
    led = load_ledger(Path(__file__).resolve().parent.parent / "patches.toml")
    vllm = led.series("vllm")
    assert [p.id for p in vllm][:3] == [
        "u57632-dflash-context-kv-in-draft-cudagraph",
        "01-pdl-sm12x",
        "02-dflash2-is-causal-config",
    ]
    assert vllm[-1].id == "u58021-single-group-prefix-match-unit"
    assert led.get("fi-02-fp8-mla-cta-tile-clamp").files == ["include/flashinfer/attention/mla.cuh"]
    fi = led.targets["flashinfer"]
    assert (
        fi.path_map.to_installed("include/flashinfer/attention/mla.cuh")
        == "flashinfer/data/include/flashinfer/attention/mla.cuh"
    )
    assert fi.path_map.to_source("flashinfer/data/include/x.cuh") == "include/x.cuh"
    held = led.get("p1-short-turn-caching")
    assert held.state == "held" and "0.237" in held.reason
    dropped = led.get("u57477-long-context-fix")
    assert dropped.state == "dropped" and dropped.upstream.prs == ["vllm-project/vllm#57477"]
    assert led.get("pr2393-v2.30.7").optional
    assert led.get("u58250-revert-55960-dflash2-grouped-conv").upstream.reverts == ["vllm-project/vllm#55960"]


def test_list_and_show(run, real_ledger: Path) -> None:
    r = run("list", "--json", "--target", "vllm", "--state", "active", cwd=real_ledger)
    assert r.code == 0, r
    rows = json.loads(r.stdout)
    assert [row["order"] for row in rows] == list(range(1, 19))
    r = run("show", "--json", "u58021-single-group-prefix-match-unit", cwd=real_ledger)
    data = json.loads(r.stdout)
    assert data["order"] == 18 and data["tests"][0]["tags"] == ["cpu"]
    r = run("show", "u58021-single-group-prefix-match-unt", cwd=real_ledger)
    assert r.code == 2 and "did you mean 'u58021-single-group-prefix-match-unit'" in r.stderr


BAD = {
    "bad-toml": ("schema = 1\n[targets.demo\n", 2, "invalid TOML"),
    "unknown-key": (
        'schema = 1\n[targets.demo]\nupstream = "u"\ngithub = "a/b"\nbrach = "main"\n',
        5,
        "unknown key 'brach'",
        "did you mean 'branch'?",
    ),
    "missing-id": (
        'schema = 1\n[targets.demo]\nupstream = "u"\ngithub = "a/b"\n\n[[patch]]\ntarget = "demo"\n'
        'title = "t"\norigin = "ours"\n',
        6,
        "missing required key 'id'",
    ),
    "duplicate-id": (
        'schema = 1\n[targets.demo]\nupstream = "u"\ngithub = "a/b"\n\n'
        '[[patch]]\nid = "a"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n\n'
        '[[patch]]\nid = "a"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n',
        13,
        "duplicate id 'a'",
    ),
    "unknown-target": (
        'schema = 1\n[targets.vllm]\nupstream = "u"\ngithub = "a/b"\n\n'
        '[[patch]]\nid = "a"\ntarget = "vlm"\ntitle = "t"\norigin = "ours"\n',
        8,
        "unknown target 'vlm'",
        "did you mean 'vllm'?",
    ),
    "body-outside": (
        'schema = 1\n[targets.demo]\nupstream = "u"\ngithub = "a/b"\n\n'
        '[[patch]]\nid = "a"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\nbody = "../../etc/x.patch"\n',
        11,
        "outside the repository",
    ),
    "body-absolute": (
        'schema = 1\n[targets.demo]\nupstream = "u"\ngithub = "a/b"\n\n'
        '[[patch]]\nid = "a"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\nbody = "/etc/x.patch"\n',
        11,
        "outside the repository",
    ),
    "bad-origin": (
        'schema = 1\n[targets.demo]\nupstream = "u"\ngithub = "a/b"\n\n'
        '[[patch]]\nid = "a"\ntarget = "demo"\ntitle = "t"\norigin = "upstrem"\n',
        10,
        "'upstrem' is not one of",
        "did you mean 'upstream'?",
    ),
    "wrong-type": (
        'schema = 1\n[targets.demo]\nupstream = "u"\ngithub = "a/b"\nstrip = "1"\n',
        5,
        "expected an integer",
    ),
    "held-no-reason": (
        'schema = 1\n[targets.demo]\nupstream = "u"\ngithub = "a/b"\n\n'
        '[[patch]]\nid = "a"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\nstate = "held"\n',
        11,
        "a held patch needs a reason",
    ),
    "dropped-no-reason": (
        'schema = 1\n[targets.demo]\nupstream = "u"\ngithub = "a/b"\n\n'
        '[[patch]]\nid = "a"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\nstate = "dropped"\n',
        11,
        "a dropped patch needs a reason",
    ),
    "bad-ref": (
        'schema = 1\n[targets.demo]\nupstream = "u"\ngithub = "a/b"\n\n'
        '[[patch]]\nid = "a"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n[patch.upstream]\nprs = ["58021"]\n',
        12,
        "is not an upstream reference",
    ),
    "bad-schema": ("schema = 7\n", 1, "schema version 7 is not supported"),
    "unknown-test-key": (
        'schema = 1\n[targets.demo]\nupstream = "u"\ngithub = "a/b"\n\n'
        '[[patch]]\nid = "a"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n'
        '[[patch.tests]]\ncomand = "pytest"\n',
        12,
        "unknown key 'comand'",
        "did you mean 'command'?",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_ledger(run, tmp_path: Path, digest, case: str) -> None:
    text, line, message, *hint = BAD[case]
    (tmp_path / "patches.toml").write_text(text)
    (tmp_path / "x.patch").write_text("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    before = digest(tmp_path)
    for cmd in (
        ["validate"],
        ["list"],
        ["import", "--target", "demo", str(tmp_path / "x.patch")],
        ["export", "--format", "quilt", str(tmp_path / "out")],
    ):
        r = run(*cmd, cwd=tmp_path)
        assert r.code == 2, (cmd, r)
        assert f"patches.toml:{line}" in r.stderr, (cmd, r)
        assert message in r.stderr, (cmd, r)
        for h in hint:
            assert h in r.stderr
        assert "Traceback" not in r.stderr + r.stdout
        assert digest(tmp_path) == before, f"{cmd} changed files"


def test_bad_lock_hash(run, ledger_dir: Path, digest) -> None:
    (ledger_dir / "patches.lock").write_text('schema = 1\n[bodies]\nmy-patch = "abc123"\n')
    before = digest(ledger_dir)
    r = run("validate", cwd=ledger_dir)
    assert r.code == 2
    assert "patches.lock:3" in r.stderr and "bad sha256 'abc123'" in r.stderr and "do not edit it" in r.stderr
    assert digest(ledger_dir) == before


def test_body_hash_mismatch_is_a_finding(run, ledger_dir: Path, tmp_path: Path) -> None:
    p = tmp_path / "one.patch"
    p.write_text("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    assert run("import", p, cwd=ledger_dir).code == 0
    body = ledger_dir / "patchset/series/demo/one.patch"
    body.write_text(body.read_text().replace("+b", "+c"))
    r = run("validate", "--json", cwd=ledger_dir)
    assert r.code == 1
    assert json.loads(r.stdout)["bodies"]["one"] == "hash mismatch"


def test_missing_ledger_message(run, tmp_path: Path) -> None:
    r = run("validate", cwd=tmp_path)
    assert r.code == 2 and "file not found" in r.stderr and "patchset init" in r.stderr


def test_init_then_validate(run, tmp_path: Path) -> None:
    assert run("init", "--title", "t", cwd=tmp_path).code == 0
    assert (tmp_path / "patchset" / "series").is_dir()
    assert run("validate", cwd=tmp_path).code == 0
    r = run("init", cwd=tmp_path)
    assert r.code == 2 and "already exists" in r.stderr


def test_write_keeps_comments_and_order(run, ledger_dir: Path, tmp_path: Path) -> None:
    p = tmp_path / "two.patch"
    p.write_text("Subject: [PATCH] Fix a thing\n\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    assert run("import", p, cwd=ledger_dir).code == 0
    text = (ledger_dir / "patches.toml").read_text()
    assert text.startswith("# a comment a human wrote\nschema = 1\n\n[targets.demo]")
    assert 'title = "Fix a thing"' in text
    assert (ledger_dir / "patches.lock").read_text().startswith("# Written by patchset")


# ---- the production ledger's facts (the maintainer's ledger facts) and its tests (issue 17, item 3) ---


def test_real_ledger_facts_that_were_guessed_are_corrected() -> None:
    led = load_ledger(Path(__file__).resolve().parent.parent / "patches.toml")
    nccl = led.get("pr2393-v2.30.7")
    assert nccl.files == ["src/transport/net_ib/p2p.cc"] and nccl.authors == ["kodlan"]
    revert = led.get("u58250-revert-55960-dflash2-grouped-conv")
    assert revert.authors == [] and "unknown" in revert.notes and "mgoin" in revert.notes
    # porter only where the record says the maintainer ported it
    assert {p.id for p in led.patches if p.porter} == {"10-dflash2-drafter-w8a16", "p2-mla-fused-qkv-a-w8a16"}
    assert "carried so later patches" not in led.get("u58834-glm5next-non-mhc-sp-decoder-layout").notes
    assert led.get("u58021-single-group-prefix-match-unit").status.merged_at is None  # "before 2026-10-02"
    assert nccl.status.recorded is None and nccl.status.pr_state == "open"


def test_real_ledger_every_active_patch_declares_a_test(run, real_ledger: Path) -> None:
    r = run("validate", "--json", cwd=real_ledger)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert rep["untested"] == [] and not [w for w in rep["warnings"] if "no test" in w]
    assert len(rep["tests"]) == 21
    led = load_ledger(real_ledger / "patches.toml")
    for p in led.series(states=("active",)):
        assert p.tests, p.id
        for t in p.tests:
            if t.kind == "command":
                assert re.search(r"\btests/\S+\.py\b", t.command), (p.id, t.command)
            if "gpu" in t.tags or "spark" in t.tags:
                assert {"gpu", "spark"} <= set(t.tags), (p.id, t.name)
    longctx = {p.id for p in led.series(states=("active",)) if any(t.kind == "longctx" for t in p.tests)}
    assert {"u58704-sm90-sparse-mla-index-kpool", "u58454-kpool-tail-ring-spec-decode"} <= longctx


def test_validate_warns_per_untested_patch_without_failing(run, ledger_dir: Path, tmp_path: Path) -> None:
    text = (ledger_dir / "patches.toml").read_text()
    text += '\n[[patch]]\nid = "a"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n'
    text += '\n[[patch]]\nid = "b"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n'
    text += '[[patch.tests]]\ncommand = "true"\n'
    text += '\n[[patch]]\nid = "c"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\nstate = "held"\nreason = "r"\n'
    (ledger_dir / "patches.toml").write_text(text)
    r = run("validate", "--json", cwd=ledger_dir)
    assert r.code == 0, r  # a warning, not a problem: untested ledgers stay valid
    rep = json.loads(r.stdout)
    assert rep["untested"] == ["a"]  # b has a test, c is held
    assert [w for w in rep["warnings"] if "no test" in w] == [
        "a: no test declared (declare one in its patch.tests, see docs/ledger.md)"
    ]
    r = run("validate", cwd=ledger_dir)
    assert r.code == 0 and "a: no test declared" in r.stdout


def _bracketing_releases(project: str, version: str) -> tuple[str, str]:
    """The last release at or before ``version`` and the first at or after it, from the index."""
    from packaging.version import Version

    from patchset.upstream import releases

    want = Version(version)
    have = releases.list_versions(project)
    return str(max(v for v in have if v <= want)), str(min(v for v in have if v >= want))


@pytest.mark.network
def test_declared_upstream_test_files_exist_in_the_base_source() -> None:
    """Every upstream test file the production ledger names exists in the base's source. The base
    is a nightly (0.30.1rc1.dev48) no release is; the releases on either side of it (read from the
    index, through the patchset.upstream.releases cache) must both carry the file."""
    from patchset.upstream import releases
    from patchset.upstream.archives import FILE, ArchiveReader

    reason = releases.probe_index()
    if reason:
        pytest.skip(f"network test: {reason}")
    led = load_ledger(Path(__file__).resolve().parent.parent / "patches.toml")
    before, after = _bracketing_releases("vllm", led.targets["vllm"].base_version)
    assert (before, after) == ("0.30.0", "0.31.0")
    named = {
        m
        for p in led.series(states=("active",))
        for t in p.tests
        if t.kind == "command"
        for m in re.findall(r"\btests/\S+\.py\b", t.command)
    }
    assert len(named) >= 10
    for version in (before, after):
        archive = releases.download(f"vllm=={version}")
        files = {m.path for m in ArchiveReader(archive) if m.kind == FILE and m.path.startswith("tests/")}
        assert not named - files, f"vllm {version} lacks {sorted(named - files)}"
        # and a path that is not there is seen as missing: the check can fail
        assert "tests/v1/core/test_no_such_file.py" not in files


@pytest.mark.parametrize(
    ("header", "said"),
    [
        ("--- a/../outside.py\n+++ b/../outside.py\n", "climbs out with '..'"),
        ("--- a/pkg/../../outside.py\n+++ b/pkg/../../outside.py\n", "climbs out with '..'"),
        ("--- a/.patchset/gate-state.json\n+++ b/.patchset/gate-state.json\n", "patchset's own state directory"),
        ("--- a/.git/hooks/post-checkout\n+++ b/.git/hooks/post-checkout\n", "points into a .git directory"),
        ("--- a/pkg/.GIT/config\n+++ b/pkg/.GIT/config\n", "points into a .git directory"),
    ],
)
def test_validate_refuses_a_body_whose_paths_leave_the_tree(run, ledger_dir: Path, header: str, said: str) -> None:
    """A cloned ledger's body naming ``..``, patchset's state or ``.git``: before, validate said the
    ledger was fine (exit 0) and only apply refused it."""
    body = (
        "Subject: [PATCH] ok\n\n---\n--- a/ok.py\n+++ b/ok.py\n@@ -1 +1 @@\n-a\n+b\n" + header + "@@ -1 +1 @@\n-a\n+b\n"
    )
    series = ledger_dir / "patchset" / "series" / "demo"
    series.mkdir(parents=True, exist_ok=True)
    (series / "evil.patch").write_text(body)
    text = (ledger_dir / "patches.toml").read_text()
    (ledger_dir / "patches.toml").write_text(
        text + '\n[[patch]]\nid = "evil"\ntarget = "demo"\ntitle = "t"\norigin = "ours"\n'
    )
    sha = hashlib.sha256(body.encode()).hexdigest()  # locked as its author's clone had it: nothing else is wrong
    (ledger_dir / "patches.lock").write_text(f'schema = 1\n\n[bodies]\nevil = "{sha}"\n')
    r = run("validate", "--json", cwd=ledger_dir)
    assert r.code != 0, r
    assert json.loads(r.stdout)["bodies"] == {"evil": "present"}
    problems = [p for p in json.loads(r.stdout)["problems"] if said in p]
    assert len(problems) == 1 and "evil: patchset/series/demo/evil.patch:9" in problems[0], r.stdout
    r = run("validate", cwd=ledger_dir)
    assert r.code != 0 and said in r.stdout + r.stderr and "Traceback" not in r.stderr


# ---- the rules the model owns -----------------------------------------------------------------


def test_strip_is_the_patchs_own_else_its_targets_else_one():
    from patchset.ledger.model import Ledger, Lock, Patch, Source, Target

    t = Target("fi", strip=2)
    own = Patch("a", "fi", "A", "ours", source=Source(strip=0))
    inherits = Patch("b", "fi", "B", "ours")
    orphan = Patch("c", "gone", "C", "ours")
    led = Ledger(Path("patches.toml"), {"fi": t}, [own, inherits, orphan], Lock())
    assert [led.strip_of(p) for p in (own, inherits, orphan)] == [0, 2, 1]
    assert own.strip_on(t) == 0 and inherits.strip_on(t) == 2 and inherits.strip_on(None) == 1


def test_target_maps_paths_between_layouts():
    from patchset.ledger.model import Layout, PathMap, Target

    t = Target(
        "fi",
        installed_root="/usr/lib/python3/dist-packages/",
        path_map=PathMap([("include/", "flashinfer/data/include/")]),
        layout="installed",
    )
    assert t.layout is Layout.INSTALLED and t.layout == "installed"
    inst = "flashinfer/data/include/x.cuh"
    assert t.key_in(inst, "installed") == "include/x.cuh" and t.key_in(inst, "source") == inst
    assert t.from_installed(inst, "source") == "include/x.cuh" and t.from_installed(inst, "installed") == inst
    assert t.tree_path("include/x.cuh", "installed") == inst
    mapper = t.mapper("installed")
    assert mapper is not None and mapper("include/x.cuh") == inst
    assert t.mapper("source") is None and Target("v").mapper("installed") is None  # no prefixes: as written
    assert t.canonical("./usr/lib/python3/dist-packages/" + inst) == "include/x.cuh"
    assert t.canonical(" " + inst) == "include/x.cuh"
    assert t.layout_or(None) == "installed" and t.layout_or("source") == "source"
    assert Layout.SOURCE.artifact == "sdist" and Layout.INSTALLED.artifact == "wheel"


def test_closed_sets_read_and_write_as_their_words():
    import tomlkit

    from patchset.ledger.model import Origin, Patch, PatchState

    p = Patch("a", "v", "A", "revert", state="held")
    assert p.origin is Origin.REVERT and p.state is PatchState.HELD and p.origin.verbatim
    assert not Origin.PORT.verbatim and Origin.UPSTREAM_PARTIAL.verbatim
    assert json.dumps({"origin": p.origin, p.state: 1}) == '{"origin": "revert", "held": 1}'
    doc = tomlkit.document()
    doc["origin"] = p.origin
    assert tomlkit.dumps(doc) == 'origin = "revert"\n'
    assert f"{p.state:>6}|{p.state}|{p.state!r}" == "  held|held|'held'"
    assert {"held": 1}[p.state] == 1 and p.state in ("active", "held")
    with pytest.raises(ValueError):
        Patch("b", "v", "B", "borrowed")
