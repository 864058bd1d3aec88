"""The first hour: targets without hand-editing (``init --target``, ``target add``, presets, a
``python3.11`` target, ``github`` optional), and a build repository (per-target patch folders and
an ``EXPECTED.sha256``) onboarded with one ``import``, then applied with no editing.

The network test runs the whole path on real vLLM 0.30.0 and the real flashinfer-python
0.6.18.post1 wheel, with the example bodies (``examples/spark-sm12x``, ``examples/flashinfer-sm12x``)
laid out as a build repository, and an EXPECTED.sha256 written from the examples' own locks
(hashes recorded when those examples were verified, not by the code under test).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import sys
from pathlib import Path

import pytest

from patchset.ledger.store import load_ledger
from tests.support.build_repo import example_build_repo
from tests.support.repo import REPO_ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_init_with_targets_and_target_add(run, tmp_path: Path) -> None:
    r = run("init", "--target", "vllm", "--target", "python3.11", cwd=tmp_path)
    assert r.code == 0, r
    assert "target vllm: github vllm-project/vllm, package vllm" in r.stdout
    r = run("target", "add", "flashinfer", cwd=tmp_path)
    assert r.code == 0, r
    r = run(
        "target",
        "add",
        "mylib",
        "--upstream",
        "https://git.example.org/mylib.git",
        "--map",
        "src/=mylib/",
        cwd=tmp_path,
    )
    assert r.code == 0, r
    text = (tmp_path / "patches.toml").read_text()
    assert '[targets."python3.11"]' in text
    led = load_ledger(tmp_path / "patches.toml")
    assert list(led.targets) == ["vllm", "python3.11", "flashinfer", "mylib"]
    fi = led.targets["flashinfer"]
    assert (fi.github, fi.package, fi.layout) == ("flashinfer-ai/flashinfer", "flashinfer-python", "installed")
    assert fi.path_map.to_installed("include/flashinfer/attention/mla.cuh") == (
        "flashinfer/data/include/flashinfer/attention/mla.cuh"
    )
    assert led.targets["mylib"].github == "" and led.targets["mylib"].path_map.to_installed("src/a.py") == "mylib/a.py"
    # the second time is refused, and nothing changes
    r = run("target", "add", "flashinfer", cwd=tmp_path)
    assert r.code == 2 and "already exists" in r.stderr
    assert (tmp_path / "patches.toml").read_text() == text
    r = run("target", "add", "x", "--map", "nonsense", cwd=tmp_path)
    assert r.code == 2 and "SRC=DST" in r.stderr
    # a target without GitHub: validate and status work and say what they lack
    assert run("validate", cwd=tmp_path).code == 0
    r = run("status", "--offline", cwd=tmp_path)
    assert r.code == 0, r


def test_import_to_a_missing_target_offers_the_preset_in_one_line(run, tmp_path: Path) -> None:
    assert run("init", cwd=tmp_path).code == 0
    body = REPO_ROOT / "examples/spark-sm12x/patchset/series/vllm/02-pdl-off-sm12x.patch"
    r = run("import", "--target", "vllm", body, cwd=tmp_path)
    assert r.code == 2
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "patchset target add vllm" in err and "github vllm-project/vllm" in err


def _diff(rel: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}"))


def test_import_a_build_repository_then_apply(run, tmp_path: Path) -> None:
    """Local trees: two target folders (one with a preset and its include/ map, one generic), an
    EXPECTED.sha256 in installed paths (as an image would list them), nothing edited by hand."""
    files = {
        "vllm/platforms/cuda.py": "CAP = (9, 10)\n" + "".join(f"x{i} = {i}\n" for i in range(20)),
        "include/flashinfer/mla.cuh": "int tile = 64;\n" + "".join(f"int y{i};\n" for i in range(20)),
        "python3.11/Lib/os.py": "sep = '/'\n" + "".join(f"z{i} = {i}\n" for i in range(20)),
    }
    new = {k: v.replace("(9, 10)", "(9, 10, 12)").replace("64", "32").replace("'/'", "'//'") for k, v in files.items()}
    build = tmp_path / "build"
    for target, rel in (("vllm", "vllm/platforms/cuda.py"), ("flashinfer", "include/flashinfer/mla.cuh")):
        (build / "patches" / target).mkdir(parents=True)
        (build / "patches" / target / f"01-{target}-fix.patch").write_text(_diff(rel, files[rel], new[rel]))
    (build / "patches/python3.11").mkdir()
    (build / "patches/python3.11/0001-sep.patch").write_text(
        _diff("Lib/os.py", files["python3.11/Lib/os.py"], new["python3.11/Lib/os.py"])
    )
    sha = {k: hashlib.sha256(v.encode()).hexdigest() for k, v in new.items()}
    (build / "EXPECTED.sha256").write_text(
        f"{sha['vllm/platforms/cuda.py']}  /usr/lib/python3/dist-packages/vllm/platforms/cuda.py\n"
        f"{sha['include/flashinfer/mla.cuh']}  flashinfer/data/include/flashinfer/mla.cuh\n"
        f"{sha['python3.11/Lib/os.py']}  Lib/os.py\n"
        f"{'0' * 64}  some/other/file.py\n"
    )
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", cwd=led).code == 0
    r = run("import", build, cwd=led)
    assert r.code == 0, r
    assert "target vllm (" in r.stdout and "created from its preset" in r.stdout
    assert "target python3.11 (" in r.stdout and "created (generic)" in r.stdout
    assert "1 for vllm" in r.stdout and "1 for flashinfer" in r.stdout and "1 for python3.11" in r.stdout
    assert "some/other/file.py" in r.stdout  # said, not silently dropped
    lock = tomllib.loads((led / "patches.lock").read_text())
    assert lock["targets"]["flashinfer"]["files"] == {"include/flashinfer/mla.cuh": sha["include/flashinfer/mla.cuh"]}
    assert lock["targets"]["vllm"]["files"] == {"vllm/platforms/cuda.py": sha["vllm/platforms/cuda.py"]}
    # trees as they are installed; apply checks every patched file against EXPECTED's hashes
    trees = tmp_path / "trees"
    layout = {
        "vllm": ("vllm/platforms/cuda.py", "vllm/platforms/cuda.py"),
        "flashinfer": ("include/flashinfer/mla.cuh", "flashinfer/data/include/flashinfer/mla.cuh"),
        "python3.11": ("python3.11/Lib/os.py", "Lib/os.py"),
    }
    for t, (key, where) in layout.items():
        (trees / t / where).parent.mkdir(parents=True)
        (trees / t / where).write_text(files[key])
    args = [a for t in layout for a in ("--tree", f"{t}={trees / t}")]
    r = run("apply", *args, "--json", cwd=led)
    assert r.code == 0, r
    assert {x["target"]: x["outcome"] for x in json.loads(r.stdout)["targets"]} == dict.fromkeys(layout, "applied")
    for t, (key, where) in layout.items():
        assert hashlib.sha256((trees / t / where).read_bytes()).hexdigest() == sha[key]
    # importing the same build again changes nothing
    r = run("import", build, "--json", cwd=led)
    assert r.code == 0 and len(json.loads(r.stdout)["unchanged"]) == 3


@pytest.mark.network
def test_onboard_a_real_build_repository_on_vllm_0_30_0(run, tmp_path: Path) -> None:
    from patchset.upstream.releases import probe_index

    problem = probe_index()
    if problem:
        pytest.skip(f"package index unreachable: {problem}")
    build = example_build_repo(tmp_path / "image-build")
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", cwd=led).code == 0
    r = run("import", build, cwd=led)
    assert r.code == 0, r
    assert "4 for vllm" in r.stdout and "2 for flashinfer" in r.stdout, r.stdout
    trees = tmp_path / "trees"
    r = run(
        "apply",
        "--from-index",
        "vllm==0.30.0",
        "--from-index",
        "flashinfer-python==0.6.18.post1",
        "--into",
        trees,
        "--json",
        cwd=led,
    )
    assert r.code == 0, r
    got = {t["target"]: (t["outcome"], t["mismatched"]) for t in json.loads(r.stdout)["targets"]}
    assert got == {"vllm": ("applied", []), "flashinfer": ("applied", [])}
    # the trees carry EXPECTED.sha256's bytes, checked here independently of patchset
    for line in (build / "EXPECTED.sha256").read_text().splitlines():
        digest, path = line.split()
        root = trees / ("flashinfer" if path.startswith("flashinfer/") else "vllm")
        assert hashlib.sha256((root / path).read_bytes()).hexdigest() == digest, path
