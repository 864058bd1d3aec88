"""The test session runs on its own state (``tests.support.ownstate``): patchset's cache and state and
the XDG directories are the session's; from the user's cache only verified downloads are shared."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from patchset.journal.seal import state_dir
from patchset.upstream import cache
from tests.support import ownstate

OWN = ("PATCHSET_CACHE", "PATCHSET_STATE", *ownstate.XDG_DIRS)


def test_the_session_points_everything_at_its_own_directories(tmp_path_factory):
    base = tmp_path_factory.getbasetemp().resolve()
    for var in OWN:
        assert Path(os.environ[var]).resolve().is_relative_to(base), var
    user = ownstate.material_root().resolve()
    assert not cache.cache_dir(create=False).resolve().is_relative_to(user)
    assert cache.history_dir(create=False).resolve().is_relative_to(base)
    assert state_dir().resolve().is_relative_to(base)
    # a subprocess the tests start inherits it
    code = "from patchset.upstream import cache; from patchset.journal.seal import state_dir; "
    code += "print(cache.cache_dir(create=False)); print(state_dir())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(cache.cache_dir(create=False)), str(state_dir())]


def _user_cache(root: Path, files: dict[str, bytes], listed: dict[str, bytes]) -> Path:
    """A user's cache: ``files`` in ``dist/``, an index listing publishing ``listed`` (name -> bytes)."""
    (root / "dist").mkdir(parents=True)
    for name, data in files.items():
        (root / "dist" / name).write_bytes(data)
    record = {
        "index": "https://index.invalid/simple",
        "files": [
            {"filename": n, "hashes": {"sha256": hashlib.sha256(d).hexdigest()}, "size": len(d)}
            for n, d in listed.items()
        ],
    }
    (root / "index" / "0123456789abcdef").mkdir(parents=True)
    (root / "index" / "0123456789abcdef" / "demo.json").write_text(json.dumps(record))
    return root


def test_only_downloads_matching_the_index_are_shared(tmp_path):
    good, bad = b"release 1.0\n" * 100, b"release 1.1\n" * 100
    user = _user_cache(
        tmp_path / "user",
        {"demo-1.0.tar.gz": good, "demo-1.1.tar.gz": bad + b"!", "demo-1.2.tar.gz": b"x", ".demo-2.0.tar.gz.part": b""},
        {"demo-1.0.tar.gz": good, "demo-1.1.tar.gz": bad, "demo-1.2.tar.gz": b"y"},
    )
    (user / "dist" / "demo-1.3.tar.gz").write_bytes(b"not listed")
    dist = tmp_path / "session" / "dist"
    dist.mkdir(parents=True)
    shared = ownstate.share_downloads(user, dist)
    assert sorted(p.name for p in dist.iterdir()) == ["demo-1.0.tar.gz"]
    assert (dist / "demo-1.0.tar.gz").stat().st_ino == (user / "dist" / "demo-1.0.tar.gz").stat().st_ino
    assert [r.split(":")[0] for r in shared.refused] == ["demo-1.1.tar.gz", "demo-1.2.tar.gz", "demo-1.3.tar.gz"]
    assert "bytes" in shared.refused[0] and "sha256" in shared.refused[1] and "listing" in shared.refused[2]
    assert ownstate.check_shared(shared) == []
    # replacing the session's file (what the product does) leaves the user's alone and is fine
    (dist / "new").write_bytes(b"other")
    os.replace(dist / "new", dist / "demo-1.0.tar.gz")
    assert ownstate.check_shared(shared) == [] and (user / "dist" / "demo-1.0.tar.gz").read_bytes() == good


def test_a_test_writing_through_a_shared_download_is_caught(tmp_path):
    data = b"release\n" * 50
    user = _user_cache(tmp_path / "user", {"demo-1.0.tar.gz": data}, {"demo-1.0.tar.gz": data})
    dist = tmp_path / "dist"
    dist.mkdir()
    shared = ownstate.share_downloads(user, dist)
    with (dist / "demo-1.0.tar.gz").open("r+b") as fh:
        fh.write(b"X")
    assert ownstate.check_shared(shared) == [str(dist / "demo-1.0.tar.gz")]


def test_redirect_keeps_the_engine_venvs_and_material_of_the_user_cache(tmp_path, monkeypatch):
    user = _user_cache(tmp_path / "user", {}, {})
    monkeypatch.setenv("PATCHSET_CACHE", str(user))
    monkeypatch.setenv("PATCHSET_VLLM_TESTS_VENV", str(tmp_path / "elsewhere"))
    for var in ("PATCHSET_ENGINE_VENV", ownstate.MATERIAL_ENV, "PIP_CONFIG_FILE"):
        monkeypatch.delenv(var, raising=False)
    conf = tmp_path / "config" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("[global]\nindex-url = https://mirror.invalid/simple\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    base = tmp_path / "base"
    with pytest.MonkeyPatch.context() as mp:
        ownstate.redirect(base, mp)
        assert os.environ["PATCHSET_ENGINE_VENV"] == str(user / "engine-venv")  # where ci/setup_engine.sh put it
        assert os.environ["PATCHSET_VLLM_TESTS_VENV"] == str(tmp_path / "elsewhere")  # set explicitly: kept
        assert ownstate.material_root() == user
        assert os.environ["PIP_CONFIG_FILE"] == str(conf)  # the user's pip index, though XDG_CONFIG_HOME moved
        assert cache.cache_dir(create=False) == base / "cache" and state_dir() == base / "state"
        assert all(Path(os.environ[v]).is_relative_to(base) for v in ownstate.XDG_DIRS)
    assert os.environ["PATCHSET_CACHE"] == str(user)  # undone with the MonkeyPatch
