"""GitHub's own published descriptions of its API, downloaded once into a cache for the tests.

The fake hub and the conformance tests check the tracker against what GitHub publishes, not
against what the fake happens to do:

- ``@octokit/graphql-schema`` (npm): GitHub's GraphQL schema as an introspection result;
- ``@octokit/openapi`` (npm): GitHub's REST API description (``api.github.com.deref.json``);
- PyGithub's source distribution (the package index): ``tests/ReplayData/``, about a thousand
  exchanges recorded against the real api.github.com.

All three are fetched with their registries' ordinary clients (``npm pack``, ``pip download``)
into ``<cache>/npm`` and ``<cache>/pypi`` (patchset's cache root, ``patchset.upstream.cache``) and
read from there; nothing is copied into the repository. ``.ci/run`` calls
``python -m tests.support.fakehub.specs`` to fill the cache; a test whose material is missing
skips and says why.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

GRAPHQL_SCHEMA = ("@octokit/graphql-schema", "15.26.1", "package/schema.json", "schema.json")
OPENAPI = ("@octokit/openapi", "23.0.2", "package/generated/api.github.com.deref.json", "api.github.com.deref.json")


def cache_root() -> Path:
    """The tests' material cache (``tests.support.ownstate.material_root``): the user's cache root,
    where ``.ci/run`` fills it before the test session redirects patchset's own cache."""
    from tests.support.ownstate import material_root

    return material_root()


class Missing(Exception):
    """The material is not cached and could not be fetched; the message says why."""


def _npm_path(spec: tuple[str, str, str, str]) -> Path:
    name, version, _member, filename = spec
    return cache_root() / "npm" / name.lstrip("@").replace("/", "-") / version / filename


def _npm_fetch(spec: tuple[str, str, str, str]) -> Path:
    """``npm pack NAME@VERSION`` and keep the one file the tests read."""
    name, version, member, _filename = spec
    dest = _npm_path(spec)
    if dest.is_file():
        return dest
    npm = shutil.which("npm")
    if not npm:
        raise Missing(f"{name}@{version} is not cached ({dest}) and npm is not installed")
    with tempfile.TemporaryDirectory(prefix="patchset-npm-") as work:
        try:
            out = subprocess.run(
                [npm, "pack", f"{name}@{version}", "--loglevel=error"],
                cwd=work,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise Missing(f"cannot fetch {name}@{version} from the npm registry: {exc}") from None
        tgz = next(Path(work).glob("*.tgz"), None)
        if out.returncode != 0 or tgz is None:
            why = (out.stderr.strip().splitlines() or ["no tarball"])[-1]
            raise Missing(f"cannot fetch {name}@{version} from the npm registry: {why}")
        with tarfile.open(tgz) as tar:
            fh = tar.extractfile(tar.getmember(member))
            if fh is None:
                raise Missing(f"{name}@{version} has no {member}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_suffix(".tmp")
            tmp.write_bytes(fh.read())
            tmp.replace(dest)
    return dest


def pygithub_version() -> str:
    return metadata.version("PyGithub")


def _replay_dir() -> Path:
    return cache_root() / "pypi" / f"PyGithub-{pygithub_version()}" / "ReplayData"


def _replay_fetch() -> Path:
    """``pip download --no-binary :all: --no-deps PyGithub==<installed>`` and keep ``tests/ReplayData``."""
    dest = _replay_dir()
    if dest.is_dir() and any(dest.glob("*.txt")):
        return dest
    version = pygithub_version()
    with tempfile.TemporaryDirectory(prefix="patchset-pypi-") as work:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps"]
        cmd += ["-d", work, f"PyGithub=={version}"]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise Missing(f"cannot download PyGithub {version}'s source distribution: {exc}") from None
        sdist = next(Path(work).glob("*.tar.gz"), None)
        if out.returncode != 0 or sdist is None:
            why = (out.stderr.strip().splitlines() or ["no sdist"])[-1]
            raise Missing(f"cannot download PyGithub {version}'s source distribution: {why}")
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with tarfile.open(sdist) as tar:
            for m in tar.getmembers():
                if m.isfile() and "/tests/ReplayData/" in m.name and m.name.endswith(".txt"):
                    fh = tar.extractfile(m)
                    if fh is not None:
                        (tmp / Path(m.name).name).write_bytes(fh.read())
        shutil.rmtree(dest, ignore_errors=True)
        tmp.replace(dest)
    return dest


# ---- readers (cache only unless fetch=True) -------------------------------------------------
def graphql_schema_path(fetch: bool = False) -> Path:
    path = _npm_path(GRAPHQL_SCHEMA)
    if path.is_file():
        return path
    if fetch:
        return _npm_fetch(GRAPHQL_SCHEMA)
    raise Missing(f"GitHub's GraphQL schema is not cached ({path}); run `python -m tests.support.fakehub.specs`")


@functools.lru_cache(maxsize=2)
def graphql_schema(fetch: bool = False) -> Any:
    """GitHub's published GraphQL schema as a ``graphql.GraphQLSchema`` (its introspection
    result is built as is: graphql-core's own schema checks are skipped, the document rules work)."""
    from graphql import build_client_schema

    data = json.loads(graphql_schema_path(fetch).read_text(encoding="utf-8"))
    return build_client_schema(data.get("data", data), assume_valid=True)


@functools.lru_cache(maxsize=2)
def openapi(fetch: bool = False) -> dict[str, Any]:
    path = _npm_path(OPENAPI)
    if not path.is_file():
        if not fetch:
            raise Missing(f"GitHub's OpenAPI description is not cached ({path})")
        path = _npm_fetch(OPENAPI)
    return json.loads(path.read_text(encoding="utf-8"))


def replay_dir(fetch: bool = False) -> Path:
    path = _replay_dir()
    if path.is_dir() and any(path.glob("*.txt")):
        return path
    if fetch:
        return _replay_fetch()
    raise Missing(f"PyGithub's recorded GitHub responses are not cached ({path})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.support.fakehub.specs",
        description="Download GitHub's published API descriptions and PyGithub's recorded responses into the cache.",
    )
    ap.parse_args(argv)
    failed = 0
    for label, fetch in (
        (f"{GRAPHQL_SCHEMA[0]}@{GRAPHQL_SCHEMA[1]}", lambda: _npm_fetch(GRAPHQL_SCHEMA)),
        (f"{OPENAPI[0]}@{OPENAPI[1]}", lambda: _npm_fetch(OPENAPI)),
        (f"PyGithub {pygithub_version()} ReplayData", _replay_fetch),
    ):
        try:
            print(f"{label}: {fetch()}")
        except Missing as exc:
            failed += 1
            print(f"warning: {exc}; the tests that need it will skip and say so", file=sys.stderr)
    return 0 if not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
