"""``patchset audit DIR``: the ledger held against a directory of real-format bodies.

The fixtures are written here, in the formats the maintainer's build repository uses (a quilt
directory with a ``series`` file for vLLM, a FlashInfer body in the installed layout, a plain
``git diff`` for NCCL, an ``EXPECTED.sha256`` in ``sha256sum`` format); every body is produced by
real git from real file trees, not typed by hand. Each test plants one disagreement the issue names
and checks that audit reports exactly it, on its own line, naming the file (and line).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from patchset.commands.audit import audit
from patchset.commands.inspection import validate
from patchset.ledger.store import load_ledger
from tests.support.checkout import example_copy
from tests.support.repo import REPO_ROOT, commit_files, git_bytes, new_repo

LEDGER = """\
schema = 1

[targets.vllm]
upstream = "https://example.invalid/vllm.git"
github = "example/vllm"
layout = "installed"
installed_root = "/usr/local/lib/python3.12/dist-packages"

[targets.flashinfer]
upstream = "https://example.invalid/flashinfer.git"
github = "example/flashinfer"
layout = "installed"
installed_root = "/usr/local/lib/python3.12/dist-packages"

[targets.flashinfer.path_map]
"include/" = "flashinfer/data/include/"

[targets.nccl]
upstream = "https://example.invalid/nccl.git"
github = "example/nccl"
layout = "source"

[[patch]]
id = "01-alpha"
target = "vllm"
title = "alpha"
origin = "ours"
files = ["vllm/alpha.py"]

[[patch]]
id = "02-beta"
target = "vllm"
title = "beta"
origin = "ours"
files = ["vllm/beta.py"]

[[patch]]
id = "u3-gamma"
target = "vllm"
title = "gamma"
origin = "ours"
files = ["vllm/gamma.py"]

[[patch]]
id = "fi-02-tile-clamp"
target = "flashinfer"
title = "clamp"
origin = "port"
files = ["include/flashinfer/attention/mla.cuh"]

[[patch]]
id = "pr1-v1"
target = "nccl"
title = "fence"
origin = "upstream"
files = ["src/transport/net_ib.cc"]
"""


def _diff(tmp: Path, name: str, files: dict[str, str], change: dict[str, str], *, mail: bool) -> bytes:
    """A body made by git: a format-patch mail (``mail``) or a plain ``git diff``."""
    repo = tmp / f"repo-{name}"
    new_repo(repo, files)
    commit_files(repo, f"{name}: change", change)
    if mail:
        return git_bytes(repo, "format-patch", "-1", "--stdout", "HEAD")
    return git_bytes(repo, "diff", "HEAD~1", "HEAD")


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    """A ledger (tmp/ledger) and a maintainer-style directory (tmp/image-main) that agree."""
    led = tmp_path / "ledger"
    led.mkdir()
    (led / "patches.toml").write_text(LEDGER)
    src = tmp_path / "image-main"
    vdir = src / "patches" / "vllm"
    vdir.mkdir(parents=True)
    names = []
    for pid, f in (("01-alpha", "alpha"), ("02-beta", "beta"), ("u3-gamma", "gamma")):
        body = _diff(tmp_path, pid, {f"vllm/{f}.py": "x = 1\n"}, {f"vllm/{f}.py": "x = 2\n"}, mail=True)
        (vdir / f"{pid}.patch").write_bytes(body)
        names.append(f"{pid}.patch")
    (vdir / "series").write_text("# applied with patch -p1 -F0\n" + "".join(f"{n}\n" for n in names))
    fdir = src / "patches" / "flashinfer"
    fdir.mkdir()
    cuh = "flashinfer/data/include/flashinfer/attention/mla.cuh"  # the installed layout
    body = _diff(tmp_path, "fi", {cuh: "tile = 64;\n"}, {cuh: "tile = min(64, 32);\n"}, mail=False)
    (fdir / "fi-02-tile-clamp.patch").write_bytes(body)
    ndir = src / "nccl"
    ndir.mkdir()
    p2p = "src/transport/net_ib.cc"
    body = _diff(tmp_path, "nccl", {p2p: "poll();\n"}, {p2p: "poll();\nfence();\n"}, mail=False)
    (ndir / "pr1-v1.diff").write_bytes(body)
    return led, src


def _audit(led: Path, src: Path, target: str | None = None):
    return audit(load_ledger(led / "patches.toml"), src, target)


def test_agreeing_directory_has_no_finding(world, run) -> None:
    led, src = world
    rep = _audit(led, src)
    assert rep.findings == [], rep.lines()
    assert rep.matched["fi-02-tile-clamp"] == "patches/flashinfer/fi-02-tile-clamp.patch"
    assert len(rep.matched) == 5 and rep.series_files == ["patches/vllm/series"]
    r = run("audit", src, cwd=led)
    assert r.code == 0, r
    assert r.stdout.strip().endswith("5 bodies matched, 0 finding(s)")


def test_installed_layout_body_under_source_layout_declaration(world) -> None:
    """The FlashInfer body names flashinfer/data/include/…; the ledger declares include/…: the same
    file through the path map, so neither audit nor validate reports it."""
    led, src = world
    rep = _audit(led, src)
    assert not [f for f in rep.findings if f.patch == "fi-02-tile-clamp"]
    # validate, with the same body imported at its default path, agrees
    body = src / "patches/flashinfer/fi-02-tile-clamp.patch"
    dest = led / "patchset/series/flashinfer/fi-02-tile-clamp.patch"
    dest.parent.mkdir(parents=True)
    dest.write_bytes(body.read_bytes())
    vrep = validate(load_ledger(led / "patches.toml"))
    assert not [w for w in vrep.warnings if "differ" in w], vrep.warnings
    ledger = load_ledger(led / "patches.toml")
    fi = ledger.targets["flashinfer"]
    for spelling in (
        "include/flashinfer/attention/mla.cuh",
        "flashinfer/data/include/flashinfer/attention/mla.cuh",
        "./flashinfer/data/include/flashinfer/attention/mla.cuh",
        "usr/local/lib/python3.12/dist-packages/flashinfer/data/include/flashinfer/attention/mla.cuh",
    ):
        assert fi.canonical(spelling) == "include/flashinfer/attention/mla.cuh"


def test_validate_still_reports_a_real_file_difference(world) -> None:
    led, src = world
    text = (led / "patches.toml").read_text().replace('"include/flashinfer/attention/mla.cuh"', '"include/x.cuh"')
    (led / "patches.toml").write_text(text)
    dest = led / "patchset/series/flashinfer/fi-02-tile-clamp.patch"
    dest.parent.mkdir(parents=True)
    dest.write_bytes((src / "patches/flashinfer/fi-02-tile-clamp.patch").read_bytes())
    vrep = validate(load_ledger(led / "patches.toml"))
    [w] = [w for w in vrep.warnings if "differ" in w]
    assert "include/x.cuh" in w and "include/flashinfer/attention/mla.cuh" in w


def test_series_order_differs_from_the_ledger(world, run) -> None:
    led, src = world
    (src / "patches/vllm/series").write_text("# reordered\n02-beta.patch\nu3-gamma.patch\n01-alpha.patch\n")
    rep = _audit(led, src)
    [f] = rep.findings
    assert (f.kind, f.file, f.line, f.patch) == ("order", "patches/vllm/series", 4, "01-alpha")
    assert f.render() == "patches/vllm/series:4: 01-alpha: out of the ledger's order (the ledger applies it first)"
    r = run("audit", src, cwd=led)
    assert r.code == 1
    assert "patches/vllm/series:4: 01-alpha: out of the ledger's order" in r.stdout


def test_extra_body_and_entry_without_body(world, run, tmp_path: Path) -> None:
    led, src = world
    extra = _diff(tmp_path, "extra", {"vllm/delta.py": "a\n"}, {"vllm/delta.py": "b\n"}, mail=True)
    (src / "patches/vllm/11-lmhead-w8a16.patch").write_bytes(extra)
    (src / "patches/vllm/02-beta.patch").unlink()
    (src / "patches/vllm/series").write_text("01-alpha.patch\nu3-gamma.patch\n")
    rep = _audit(led, src)
    got = {(f.kind, f.file, f.line) for f in rep.findings}
    ledger_line = load_ledger(led / "patches.toml").get("02-beta").line
    assert got == {
        ("unmatched-body", "patches/vllm/11-lmhead-w8a16.patch", None),
        ("no-body", "patches.toml", ledger_line),
    }
    r = run("audit", "--json", src, cwd=led)
    assert r.code == 1
    data = json.loads(r.stdout)
    assert data["ok"] is False and len(data["findings"]) == 2
    assert {f["kind"] for f in data["findings"]} == {"unmatched-body", "no-body"}


def test_guessed_file_path(world, tmp_path: Path) -> None:
    """The ledger declares net_ib.cc; the real body changes net_ib/p2p.cc."""
    led, src = world
    p2p = "src/transport/net_ib/p2p.cc"
    body = _diff(tmp_path, "nccl2", {p2p: "poll();\n"}, {p2p: "poll();\nfence();\n"}, mail=False)
    (src / "nccl/pr1-v1.diff").write_bytes(body)
    [f] = _audit(led, src).findings
    assert f.kind == "files" and f.file == "nccl/pr1-v1.diff"
    assert "declares src/transport/net_ib.cc, which the body does not change" in f.message
    assert "the body changes src/transport/net_ib/p2p.cc, which the ledger does not declare" in f.message


def _lock(led: Path, bodies: dict[str, str], files: dict[str, str]) -> None:
    lines = ["schema = 1", "[bodies]", *(f'"{k}" = "{v}"' for k, v in bodies.items())]
    lines += ["[targets.flashinfer]", "[targets.flashinfer.files]", *(f'"{k}" = "{v}"' for k, v in files.items())]
    (led / "patches.lock").write_text("\n".join(lines) + "\n")


def test_lock_hashes_and_expected_sha256_through_the_path_map(world) -> None:
    led, src = world
    body = (src / "patches/flashinfer/fi-02-tile-clamp.patch").read_bytes()
    good = hashlib.sha256(b"tile = min(64, 32);\n").hexdigest()
    # the lock in the source layout, EXPECTED.sha256 in the installed one: they agree
    _lock(led, {"fi-02-tile-clamp": hashlib.sha256(body).hexdigest()}, {"include/flashinfer/attention/mla.cuh": good})
    exp = src / "patches/flashinfer/EXPECTED.sha256"
    exp.write_text(f"{good}  flashinfer/data/include/flashinfer/attention/mla.cuh\n")
    assert _audit(led, src).findings == []
    # a body that is not the locked one, and an EXPECTED line that disagrees with the lock
    _lock(led, {"fi-02-tile-clamp": "0" * 64}, {"include/flashinfer/attention/mla.cuh": good})
    exp.write_text(f"# build check\n{'1' * 64}  ./flashinfer/data/include/flashinfer/attention/mla.cuh\n")
    found = {(f.kind, f.file, f.line) for f in _audit(led, src).findings}
    assert found == {
        ("body-hash", "patches/flashinfer/fi-02-tile-clamp.patch", None),
        ("expected-hash", "patches/flashinfer/EXPECTED.sha256", 2),
    }


def test_expected_sha256_that_misses_a_patched_file(world) -> None:
    led, src = world
    exp = src / "patches/vllm/EXPECTED.sha256"
    exp.write_text(f"{'2' * 64}  vllm/alpha.py\n{'3' * 64}  vllm/beta.py\n{'4' * 64}  vllm/other.py\n")
    found = {(f.kind, f.line, f.message) for f in _audit(led, src).findings}
    assert found == {
        ("expected-extra", 3, "vllm/other.py: no body of the vllm series changes vllm/other.py"),
        ("expected-missing", None, "the vllm series changes vllm/gamma.py, which has no line here"),
    }


def test_held_patch_in_series_and_numbered_order_and_missing_series_entry(world, tmp_path: Path) -> None:
    led, src = world
    text = (
        (led / "patches.toml")
        .read_text()
        .replace(
            'id = "u3-gamma"\ntarget = "vllm"\ntitle = "gamma"\norigin = "ours"\n',
            'id = "u3-gamma"\ntarget = "vllm"\ntitle = "gamma"\norigin = "ours"\nstate = "held"\nreason = "r"\n',
        )
    )
    (led / "patches.toml").write_text(text)
    (src / "patches/vllm/series").write_text("01-alpha.patch\n02-beta.patch\nu3-gamma.patch\ngone.patch\n")
    found = {(f.kind, f.line) for f in _audit(led, src).findings}
    assert found == {("held-in-series", 3), ("series-missing", 4)}
    # numbered patches without a series file: the numbers are the order
    (src / "patches/vllm/series").unlink()
    (src / "patches/vllm/u3-gamma.patch").unlink()
    (src / "patches/vllm/01-alpha.patch").rename(src / "patches/vllm/0002-01-alpha.patch")
    (src / "patches/vllm/02-beta.patch").rename(src / "patches/vllm/0001-02-beta.patch")
    [f] = _audit(led, src).findings
    assert f.kind == "order" and f.file == "patches/vllm/0002-01-alpha.patch"


def test_target_option_and_bad_input(world, run) -> None:
    led, src = world
    rep = _audit(led, src, "flashinfer")
    assert rep.findings == [] and list(rep.matched) == ["fi-02-tile-clamp"]
    r = run("audit", "--target", "flashinfr", src, cwd=led)
    assert r.code == 2 and "unknown target 'flashinfr'" in r.stderr
    r = run("audit", led / "nope", cwd=led)
    assert r.code == 2 and "Traceback" not in r.stderr
    (src / "patches/vllm/EXPECTED.sha256").write_text("not a hash line\n")
    r = run("audit", src, cwd=led)
    assert r.code == 2 and "EXPECTED.sha256:1" in r.stderr


def test_real_ledger_declares_p2p_cc_for_the_nccl_fix(tmp_path: Path) -> None:
    """The production ledger's NCCL entry against a body in the real fix's shape (the maintainer's
    ledger facts: the one file it changes is src/transport/net_ib/p2p.cc): no file finding."""
    p2p = "src/transport/net_ib/p2p.cc"
    body = _diff(tmp_path, "nccl", {p2p: "poll();\n"}, {p2p: "poll();\nfence();\n"}, mail=False)
    d = tmp_path / "image-main" / "nccl"
    d.mkdir(parents=True)
    (d / "pr2393-v2.30.7.diff").write_bytes(body)
    rep = audit(load_ledger(REPO_ROOT / "patches.toml"), tmp_path / "image-main", "nccl")
    assert rep.matched == {"pr2393-v2.30.7": "nccl/pr2393-v2.30.7.diff"}
    assert rep.findings == [], rep.lines()


def test_real_ledger_validate_with_an_installed_layout_flashinfer_body(run, tmp_path: Path) -> None:
    """The issue's case: the production ledger with a FlashInfer body in the installed layout at its
    default path. The body is examples/flashinfer-sm12x's fix (written here against real FlashInfer
    0.6.18.post1 files) with its paths spelled as the installed wheel has them."""
    import shutil

    d = tmp_path / "real"
    (d / "patchset/series/flashinfer").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "patches.toml", d / "patches.toml")
    src = REPO_ROOT / "examples/flashinfer-sm12x/patchset/series/flashinfer/fi-02-fp8-mla-cta-tile-clamp.patch"
    body = src.read_bytes().replace(b" a/include/", b" a/flashinfer/data/include/")
    body = body.replace(b" b/include/", b" b/flashinfer/data/include/")
    assert b"+++ b/flashinfer/data/include/flashinfer/attention/mla.cuh" in body
    (d / "patchset/series/flashinfer/fi-02-fp8-mla-cta-tile-clamp.patch").write_bytes(body)
    r = run("validate", "--json", cwd=d)
    assert r.code == 1, r  # the one problem: a body is imported and there is no lock to check it against
    rep = json.loads(r.stdout)
    assert len(rep["problems"]) == 1 and "the lock is missing" in rep["problems"][0], rep["problems"]
    assert rep["bodies"]["fi-02-fp8-mla-cta-tile-clamp"] == "not in lock"
    assert not [w for w in rep["warnings"] if "differ" in w], rep["warnings"]
    # audit agrees, and an export of the example round-trips through audit without a finding
    rep = audit(load_ledger(d / "patches.toml"), d / "patchset/series", "flashinfer")
    assert [f.kind for f in rep.findings] == ["no-body"]  # fi-01 is not there; fi-02 matches
    out = tmp_path / "export"
    ex = example_copy("flashinfer-sm12x", tmp_path)
    assert run("export", "--format", "quilt", out, cwd=ex).code == 0
    assert run("export", "--format", "expected", out, cwd=ex).code == 0
    r = run("audit", out, cwd=ex)
    assert r.code == 0 and r.stdout.strip() == "2 bodies matched, 0 finding(s)", r
    (out / "series").write_text("fi-02-fp8-mla-cta-tile-clamp.patch\nfi-01-fp8-mla-sm12x-guard.patch\n")
    r = run("audit", out, cwd=ex)
    assert r.code == 1 and r.stdout.splitlines()[1] == "2 bodies matched, 1 finding(s)"
    assert r.stdout.startswith(
        "series:1: fi-02-fp8-mla-cta-tile-clamp: out of the ledger's order (the ledger applies it after fi-01"
    )
