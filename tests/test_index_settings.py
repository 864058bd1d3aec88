"""The index and cache settings a user already has: pip's index configuration and XDG_CACHE_HOME.

Every test asks real package indexes on 127.0.0.1 (``tests.support.localindex``) and counts the
requests each one received, so "used" means "asked over HTTP", not "returned by a helper". The
project names are not on PyPI, and pip's own configuration is isolated (a private HOME and
XDG_CONFIG_HOME; ``PIP_CONFIG_FILE`` only where a test writes one).
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from patchset.errors import EnvironmentFailure, InputError
from patchset.upstream import cache, indexes, releases
from tests.support.localindex import LocalIndex

REPO = Path(__file__).resolve().parent.parent
PROJECT = "patchset-index-demo"  # not on any public index
SDIST = "patchset_index_demo-1.0.tar.gz"
SPEC = f"{PROJECT}==1.0"
DEAD = "http://127.0.0.1:9/simple"  # nobody listens on port 9 (discard)


def make_sdist(folder: Path, filename: str = SDIST) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    top = filename.removesuffix(".tar.gz")
    with tarfile.open(folder / filename, "w:gz") as tf:
        data = b"print('demo')\n"
        info = tarfile.TarInfo(f"{top}/demo.py")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return folder / filename


@pytest.fixture
def env(tmp_path, monkeypatch):
    """No index settings at all, a private cache and a private pip user configuration."""
    for name in ("PATCHSET_INDEX_URL", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONFIG_FILE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    return monkeypatch


@pytest.fixture
def served(tmp_path):
    """A local index serving the demo project."""
    with LocalIndex(make_sdist(tmp_path / "served").parent) as idx:
        yield idx


def listing_hits(idx: LocalIndex) -> int:
    return idx.requests[f"/simple/{PROJECT}/"]


def test_pip_index_url_is_used(env, served):
    env.setenv("PIP_INDEX_URL", served.url)
    path = releases.download(SPEC)
    assert path == cache.dist_dir() / SDIST
    assert listing_hits(served) == 1 and served.requests[f"/files/{SDIST}"] == 1


def test_a_dead_pip_index_url_is_not_replaced_by_pypi(env):
    """The issue's example: PIP_INDEX_URL naming a dead index fails naming it, it does not quietly
    download from the public index."""
    env.setenv("PIP_INDEX_URL", DEAD)
    with pytest.raises(EnvironmentFailure) as err:
        releases.download(SPEC)
    assert f"{DEAD}/{PROJECT}/" in err.value.message


def test_pip_conf_is_used(env, served, tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {served.url}\n")
    env.setenv("PIP_CONFIG_FILE", str(conf))
    assert indexes.index_urls() == (served.url,)
    assert releases.download(SPEC).name == SDIST
    assert listing_hits(served) == 1


def test_pip_conf_install_section_wins_over_global(env, served, tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {DEAD}\n[install]\nindex-url = {served.url}\n")
    env.setenv("PIP_CONFIG_FILE", str(conf))
    assert releases.download(SPEC).name == SDIST


def test_patchset_index_url_wins_over_pip_settings(env, served, tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = {DEAD}\nextra-index-url = {DEAD}\n")
    env.setenv("PIP_CONFIG_FILE", str(conf))
    env.setenv("PIP_INDEX_URL", DEAD)
    env.setenv("PIP_EXTRA_INDEX_URL", DEAD)
    env.setenv("PATCHSET_INDEX_URL", served.url + "/")
    assert indexes.index_urls() == (served.url,)
    assert releases.download(SPEC).name == SDIST


def test_extra_index_finds_what_the_main_one_lacks(env, served, tmp_path):
    other = tmp_path / "other"
    make_sdist(other, "unrelated_project-2.0.tar.gz")
    with LocalIndex(other) as main:
        env.setenv("PIP_INDEX_URL", main.url)
        env.setenv("PIP_EXTRA_INDEX_URL", served.url)
        assert releases.download(SPEC).name == SDIST
        assert main.requests[f"/simple/{PROJECT}/"] == 1  # asked first, it answered 404
        assert listing_hits(served) == 1
        assert releases.list_versions(PROJECT) == [releases.Version("1.0")]


def test_main_index_is_asked_first_and_wins(env, tmp_path):
    with LocalIndex(make_sdist(tmp_path / "a").parent) as a, LocalIndex(make_sdist(tmp_path / "b").parent) as b:
        env.setenv("PIP_INDEX_URL", a.url)
        env.setenv("PIP_EXTRA_INDEX_URL", b.url)
        files = releases.release_files(SPEC)
        assert [f.index for f in files] == [a.url]
        assert listing_hits(a) == 1 and listing_hits(b) == 0


def test_a_project_on_no_index_names_every_index_and_the_skipped_ones(env, served, tmp_path):
    env.setenv("PIP_INDEX_URL", served.url)
    env.setenv("PIP_EXTRA_INDEX_URL", f"file://{tmp_path}/mirror {served.url}/")
    with pytest.raises(InputError) as err:
        releases.download("no-such-project==1.0")
    text = err.value.render()
    assert f"not on the package index {served.url}" in text
    assert f"skipped (not http(s)): file://{tmp_path}/mirror" in text


@pytest.mark.parametrize("variable", ["PATCHSET_INDEX_URL", "PIP_INDEX_URL"])
def test_a_token_in_an_index_url_is_not_printed(env, variable):
    env.setenv(variable, "http://someone:s3cret-token@127.0.0.1:9/simple")
    with pytest.raises(EnvironmentFailure) as err:
        releases.download(SPEC)
    text = err.value.render()
    assert "s3cret-token" not in text and "someone:***@127.0.0.1:9" in text
    assert releases.probe_index(timeout=2) is not None
    assert "s3cret-token" not in (releases.probe_index(timeout=2) or "")


def test_the_command_line_uses_pip_index_url(env, run, tmp_path):
    """``apply --from-index``: PIP_INDEX_URL is the index it asks, and its error names it."""
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    (ledger / "patches.toml").write_text(
        f'schema = 1\n[targets.demo]\nupstream = "https://example.invalid/demo.git"\npackage = "{PROJECT}"\n'
        '[[patch]]\nid = "p1"\ntarget = "demo"\ntitle = "t"\norigin = "port"\n'
    )
    src = tmp_path / "p1.patch"
    src.write_text("--- a/demo.py\n+++ b/demo.py\n@@ -1 +1 @@\n-print('demo')\n+print('patched')\n")
    assert run("import", src, cwd=ledger).code == 0
    env.setenv("PIP_INDEX_URL", DEAD)
    dead = run("apply", "--from-index", SPEC, "--into", tmp_path / "t", cwd=ledger)
    assert dead.code == 2 and f"{DEAD}/{PROJECT}/" in dead.stderr
    with LocalIndex(make_sdist(tmp_path / "served").parent) as served:
        env.setenv("PIP_INDEX_URL", served.url)
        done = run("apply", "--from-index", SPEC, "--into", tmp_path / "t", cwd=ledger)
        assert done.code == 0, done.stderr
        assert listing_hits(served) == 1
    assert (tmp_path / "t" / "demo.py").read_text() == "print('patched')\n"


def test_xdg_cache_home_moves_the_cache(env, served, tmp_path):
    env.delenv("PATCHSET_CACHE")
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    env.setenv("PATCHSET_INDEX_URL", served.url)
    path = releases.download(SPEC)
    assert path == tmp_path / "xdg" / "patchset" / "dist" / SDIST
    assert not (tmp_path / "home" / ".cache").exists()


def test_cache_root_order(env, tmp_path):
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir(create=False) == tmp_path / "cache"  # PATCHSET_CACHE first
    env.delenv("PATCHSET_CACHE")
    assert cache.cache_dir(create=False) == tmp_path / "xdg" / "patchset"
    env.setenv("XDG_CACHE_HOME", "relative/dir")  # the XDG specification: a relative value is ignored
    assert cache.cache_dir(create=False) == tmp_path / "home" / ".cache" / "patchset"


def test_shell_scripts_ask_the_same_cache_root(env, tmp_path):
    """ci/setup_*.sh run ``python -m patchset.upstream.cache``: it prints what cache_dir decides."""
    env.delenv("PATCHSET_CACHE")
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    env.setenv("PYTHONPATH", str(REPO))
    out = subprocess.run(
        [sys.executable, "-m", "patchset.upstream.cache"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.strip() == str(tmp_path / "xdg" / "patchset")
    for script in ("ci/setup_engine.sh", "ci/setup_vllm_tests.sh"):
        assert "python3 -m patchset.upstream.cache" in (REPO / script).read_text()
        assert ".cache/patchset}" not in (REPO / script).read_text()


def test_pip_config_list_parsing():
    text = (
        ":env:.index-url='http://env/simple'\n"
        "global.index-url='http://a/simple'\n"
        "global.extra-index-url='http://b/simple\\nhttp://c/simple'\n"
        "install.timeout='60'\n"
        "garbage line\n"
        "global.cert=not-a-literal\n"
    )
    assert indexes.parse_config_list(text) == {
        "global.index-url": "http://a/simple",
        "global.extra-index-url": "http://b/simple\nhttp://c/simple",
        "install.timeout": "60",
    }


def test_a_listing_cached_before_one_folder_per_index_is_still_used(env, served):
    env.setenv("PATCHSET_INDEX_URL", served.url)
    releases.release_files(SPEC)
    [new] = cache.index_dir().rglob(f"{PROJECT}.json")
    new.rename(cache.index_dir() / f"{PROJECT}.json")  # the layout of earlier versions
    assert [f.filename for f in releases.release_files(SPEC)] == [SDIST]
    assert listing_hits(served) == 1  # answered from the old file, no second request


def test_a_pip_configuration_pip_cannot_read_is_an_error_not_pypi(env, tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("index-url = http://mirror.invalid/simple\n")  # no [section]: pip refuses the file
    env.setenv("PIP_CONFIG_FILE", str(conf))
    with pytest.raises(EnvironmentFailure) as err:
        releases.download(SPEC)
    assert "pip cannot read its configuration" in err.value.message and str(conf) in err.value.message
    assert err.value.exit_code == 2 and "PATCHSET_INDEX_URL" in (err.value.hint or "")
