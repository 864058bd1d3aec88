"""Build-repository onboarding fixes of issue #25: expected hashes filed through the path map in
every import route, ``audit`` splitting a shared ``EXPECTED.sha256`` per target as ``import`` does,
``--platform`` for installed-layout releases, and ``target set`` so the next commands need no editor.

The network test is the FlashInfer case from the issue, on the real flashinfer-python
0.6.18.post1 wheel: a patch naming installed paths (``a/flashinfer/data/include/…``) with its
``EXPECTED.sha256`` line, ``init``, ``import DIR``, ``apply --from-index … --into D``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from patchset.ledger.store import load_ledger
from tests.support.repo import REPO_ROOT, tree_digest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MLA = "int tile = 64;\n" + "".join(f"int y{i};\n" for i in range(20))
MLA_NEW = MLA.replace("64", "32")
INSTALLED = "flashinfer/data/include/flashinfer/attention/mla.cuh"
SOURCE = "include/flashinfer/attention/mla.cuh"


def _installed_patch(old: str, new: str) -> str:
    import difflib

    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{INSTALLED}", f"b/{INSTALLED}"))


def _build(root: Path, patch: str, digest: str) -> Path:
    (root / "patches/flashinfer").mkdir(parents=True)
    (root / "patches/flashinfer/01-tile.patch").write_text(patch)
    (root / "EXPECTED.sha256").write_text(f"{digest}  {INSTALLED}\n")
    return root


def test_import_files_an_installed_path_patchs_expected_hash_under_the_lock_key(run, tmp_path: Path) -> None:
    build = _build(tmp_path / "build", _installed_patch(MLA, MLA_NEW), hashlib.sha256(MLA_NEW.encode()).hexdigest())
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", cwd=led).code == 0
    r = run("import", build, cwd=led)
    assert r.code == 0, r
    assert "1 for flashinfer" in r.stdout, r.stdout
    lock = tomllib.loads((led / "patches.lock").read_text())["targets"]["flashinfer"]["files"]
    assert lock == {SOURCE: hashlib.sha256(MLA_NEW.encode()).hexdigest()}  # the source-layout key
    tree = tmp_path / "tree"
    (tree / INSTALLED).parent.mkdir(parents=True)
    (tree / INSTALLED).write_text(MLA)
    r = run("apply", "--target", "flashinfer", "--tree", tree, cwd=led)
    assert r.code == 0, r
    assert (tree / INSTALLED).read_text() == MLA_NEW
    # audit of the same directory agrees: no finding
    r = run("audit", build, cwd=led)
    assert r.code == 0, r


def test_audit_splits_a_shared_expected_file_per_target_as_import_does(run, tmp_path: Path) -> None:
    import difflib

    cuda = "CAP = (9, 10)\n" + "".join(f"x{i} = {i}\n" for i in range(20))
    cuda_new = cuda.replace("(9, 10)", "(9, 10, 12)")
    build = _build(tmp_path / "build", _installed_patch(MLA, MLA_NEW), hashlib.sha256(MLA_NEW.encode()).hexdigest())
    (build / "patches/vllm").mkdir()
    (build / "patches/vllm/01-cap.patch").write_text(
        "".join(
            difflib.unified_diff(
                cuda.splitlines(True), cuda_new.splitlines(True), "a/vllm/platforms/cuda.py", "b/vllm/platforms/cuda.py"
            )
        )
    )
    with (build / "EXPECTED.sha256").open("a") as fh:
        fh.write(f"{hashlib.sha256(cuda_new.encode()).hexdigest()}  vllm/platforms/cuda.py\n")
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", cwd=led).code == 0
    r = run("import", build, cwd=led)
    assert r.code == 0 and "1 for vllm" in r.stdout and "1 for flashinfer" in r.stdout, r
    r = run("audit", build, "--json", cwd=led)
    assert r.code == 0, r.stdout  # one EXPECTED file, two targets: no finding
    # a wrong hash is found for the target that owns that line
    text = (build / "EXPECTED.sha256").read_text().replace(hashlib.sha256(cuda_new.encode()).hexdigest(), "0" * 64)
    (build / "EXPECTED.sha256").write_text(text)
    r = run("audit", build, "--json", cwd=led)
    assert r.code == 1, r
    kinds = [(f["kind"], f["message"]) for f in json.loads(r.stdout)["findings"]]
    assert kinds == [
        ("expected-hash", "vllm/platforms/cuda.py: sha256 differs from the lock's for vllm/platforms/cuda.py")
    ]


def test_target_set_changes_a_target_without_an_editor(run, tmp_path: Path) -> None:
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", "--target", "vllm", cwd=led).code == 0
    r = run(
        "target", "set", "vllm", "--base", "vllm==0.30.0", "--installed-root", "/usr/local/lib/python3.12/dist-packages",
        "--base-image", "nvcr.io/nvidia/vllm:26.01-py3", "--layout", "installed", "--map", "csrc/=vllm/csrc/",
        cwd=led,
    )  # fmt: skip
    assert r.code == 0, r
    assert "base = 'vllm==0.30.0'" in r.stdout
    t = load_ledger(led / "patches.toml").targets["vllm"]
    assert (t.base, t.installed_root, t.base_image, t.layout) == (
        "vllm==0.30.0",
        "/usr/local/lib/python3.12/dist-packages",
        "nvcr.io/nvidia/vllm:26.01-py3",
        "installed",
    )
    assert t.path_map.to_installed("csrc/x.cu") == "vllm/csrc/x.cu"
    before = tree_digest(led)
    r = run("target", "set", "vllm", "--layout", "installed", cwd=led)
    assert r.code == 0 and "nothing to change" in r.stdout
    for args, said in (
        (("target", "set", "nope", "--base", "x"), "unknown target 'nope'"),
        (("target", "set", "vllm", "--map", "bad"), "SRC=DST"),
    ):
        r = run(*args, cwd=led)
        assert r.code == 2 and said in r.stderr, r
    assert tree_digest(led) == before


def test_what_a_just_onboarded_target_lacks_is_asked_for_with_target_set(run, tmp_path: Path) -> None:
    """After `import DIR` the target has no base, installed root or base image: rebase and build
    overlay name the `patchset target set` that supplies each (no ledger edit by hand), and after
    running it they go on."""
    build = _build(tmp_path / "build", _installed_patch(MLA, MLA_NEW), hashlib.sha256(MLA_NEW.encode()).hexdigest())
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", cwd=led).code == 0
    assert run("import", build, cwd=led).code == 0
    tree = tmp_path / "tree"
    (tree / INSTALLED).parent.mkdir(parents=True)
    (tree / INSTALLED).write_text(MLA)
    assert run("apply", "--target", "flashinfer", "--tree", tree, cwd=led).code == 0
    r = run("rebase", "--target", "flashinfer", "--onto", "flashinfer-python==9.9", "--dry-run", cwd=led)
    assert r.code == 2 and "patchset target set flashinfer --base" in r.stderr, r
    overlay = ("build", "overlay", "--target", "flashinfer", "--tree", tree, "--out", tmp_path / "o")
    r = run(*overlay, cwd=led)
    assert r.code == 2 and "patchset target set flashinfer --installed-root" in r.stderr, r
    root = "/usr/local/lib/python3.12/dist-packages"
    assert run("target", "set", "flashinfer", "--installed-root", root, cwd=led).code == 0
    r = run(*overlay, cwd=led)
    assert r.code == 2 and "patchset target set flashinfer --base-image" in r.stderr, r
    assert run("target", "set", "flashinfer", "--base-image", "nvcr.io/nvidia/vllm:26.01-py3", cwd=led).code == 0
    r = run(*overlay, cwd=led)
    assert r.code == 0, r
    assert (tmp_path / "o/overlay" / root.lstrip("/") / INSTALLED).read_text() == MLA_NEW


def test_a_body_naming_installed_paths_rebases_on_the_source_layout_history(run, tmp_path: Path) -> None:
    """An imported build-repo patch names installed paths (flashinfer/data/include/…); the upstream
    history names source paths (include/…): the rebase reads the body through the path map, carries
    it, and the refreshed body still applies to an installed tree."""
    from tests.support.repo import commit_files, new_repo

    upstream = tmp_path / "upstream"
    old = new_repo(upstream, {SOURCE: MLA, "README": "fi\n"})
    new = commit_files(upstream, "upstream moves on", {SOURCE: MLA + "// upstream footer\n"})
    build = _build(tmp_path / "build", _installed_patch(MLA, MLA_NEW), hashlib.sha256(MLA_NEW.encode()).hexdigest())
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", cwd=led).code == 0
    assert run("import", build, cwd=led).code == 0
    assert run("target", "set", "flashinfer", "--base", old, cwd=led).code == 0
    r = run("rebase", "--target", "flashinfer", "--onto", new, "--upstream", upstream, "--json", cwd=led)
    assert r.code == 0, r
    (p,) = json.loads(r.stdout)["patches"]
    assert (p["verdict"], p["how"]) == ("carried", "clean"), p
    tree = tmp_path / "tree"
    (tree / INSTALLED).parent.mkdir(parents=True)
    (tree / INSTALLED).write_text(MLA + "// upstream footer\n")
    r = run("apply", "--target", "flashinfer", "--tree", tree, "--layout", "installed", cwd=led)
    assert r.code == 0, r
    assert (tree / INSTALLED).read_text() == MLA_NEW + "// upstream footer\n"


@pytest.mark.network
def test_flashinfer_installed_paths_onboard_and_apply_on_the_real_wheel(run, tmp_path: Path) -> None:
    from patchset.upstream.releases import probe_index

    problem = probe_index()
    if problem:
        pytest.skip(f"package index unreachable: {problem}")
    src = REPO_ROOT / "examples/flashinfer-sm12x"
    body = (src / "patchset/series/flashinfer/fi-02-fp8-mla-cta-tile-clamp.patch").read_text()
    body = body.replace(" a/include/", " a/flashinfer/data/include/").replace(
        " b/include/", " b/flashinfer/data/include/"
    )
    assert f"--- a/{INSTALLED}" in body
    digest = tomllib.loads((src / "patches.lock").read_text())["targets"]["flashinfer"]["files"][SOURCE]
    build = tmp_path / "build"
    (build / "patches/flashinfer").mkdir(parents=True)
    (build / "patches/flashinfer/fi-02.patch").write_text(body)
    (build / "EXPECTED.sha256").write_text(f"{digest}  {INSTALLED}\n")
    led = tmp_path / "led"
    led.mkdir()
    assert run("init", cwd=led).code == 0
    r = run("import", build, cwd=led)
    assert r.code == 0 and "1 for flashinfer" in r.stdout, r
    out = tmp_path / "D"
    r = run(
        "apply", "--target", "flashinfer", "--from-index", "flashinfer-python==0.6.18.post1", "--into", out, cwd=led
    )
    assert r.code == 0, r
    assert hashlib.sha256((out / INSTALLED).read_bytes()).hexdigest() == digest


def _platform_index(tmp_path: Path) -> Path:
    from tests.support.wheel_demo import STOCK, make_wheel

    dists = tmp_path / "dists"
    for arch, value in (("x86_64", "1"), ("aarch64", "2")):
        files = {**STOCK, "demo/unchanged.py": f"VALUE = {value}\n"}
        make_wheel(dists / f"demo_pkg-1.0-py3-none-manylinux_2_17_{arch}.whl", files)
    return dists


def test_from_index_takes_a_platform_for_an_installed_layout(run, tmp_path: Path, monkeypatch) -> None:
    """A release with only platform wheels: native by default (the error used to suggest Python
    arguments), ``--platform aarch64`` takes that wheel, for ``apply`` and ``build wheel``."""
    import platform as host

    from tests.support.localindex import LocalIndex
    from tests.support.wheel_demo import make_demo

    demo = make_demo(tmp_path, run)
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    with LocalIndex(_platform_index(tmp_path)) as index:
        monkeypatch.setenv("PATCHSET_INDEX_URL", index.url)
        led = demo["ledger"]
        r = run("apply", "--from-index", "demo-pkg==1.0", "--into", tmp_path / "native", cwd=led)
        if host.machine() in ("x86_64", "aarch64"):
            assert r.code == 0, r
            want = "1" if host.machine() == "x86_64" else "2"
            assert (tmp_path / "native/demo/unchanged.py").read_text() == f"VALUE = {want}\n"
        else:  # pragma: no cover - another machine: native has no wheel, and says so
            assert r.code == 2 and "installs on this interpreter" in r.stderr
        r = run("apply", "--from-index", "demo-pkg==1.0", "--into", tmp_path / "arm", "--platform", "aarch64", cwd=led)
        assert r.code == 0, r
        assert (tmp_path / "arm/demo/unchanged.py").read_text() == "VALUE = 2\n"
        assert (tmp_path / "arm/demo/core.py").read_text() == (demo["tree"] / "demo/core.py").read_text()
        r = run(
            "build", "wheel", "--from-index", "demo-pkg==1.0", "--platform", "aarch64", "--out", tmp_path / "w", cwd=led
        )
        assert r.code == 0, r
        (built,) = (tmp_path / "w").glob("*.whl")  # beside the .patchset-output marker
        assert built.name.endswith("-py3-none-manylinux_2_17_aarch64.whl"), built.name
        r = run("apply", "--tree", demo["tree"], "--platform", "aarch64", cwd=led)
        assert r.code == 2 and "--platform goes with --from-index" in r.stderr, r


def test_a_pure_wheel_needs_no_platform(run, tmp_path: Path, monkeypatch) -> None:
    from tests.support.localindex import LocalIndex
    from tests.support.wheel_demo import make_demo

    demo = make_demo(tmp_path, run)
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    with LocalIndex(demo["wheel"].parent) as index:
        monkeypatch.setenv("PATCHSET_INDEX_URL", index.url)
        r = run(
            "apply",
            "--from-index",
            "demo-pkg==1.0",
            "--into",
            tmp_path / "D",
            "--platform",
            "aarch64",
            cwd=demo["ledger"],
        )
        assert r.code == 0, r
        # the pure wheel applies as it does without --platform: the same patched files as the locked tree
        from tests.support.repo import tree_digest

        got = {k: v for k, v in tree_digest(tmp_path / "D").items() if k.startswith("demo/")}
        want = {k: v for k, v in tree_digest(demo["tree"]).items() if k.startswith("demo/")}
        assert got and got == want
