"""``import --pr`` and ``import --revert`` (issue #25): upstream PRs a build lists (on the command line
or in a Dockerfile-like file) become upstream-origin entries that ``fetch`` pins to the PR's head,
recorded as not fetched while offline; a revert is the reverse of an upstream commit, checked
against ``git revert`` on a real repository. The PRs are served by the local GitHub-shaped server
(``tests.support.fakehub``) through the real client."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from patchset.ledger.store import load_ledger
from tests.support.fetch_world import REPO, TOKEN, World, base_tree, build_world, hub_data
from tests.support.repo import git, tree_digest


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return build_world(tmp_path_factory.mktemp("world"))


@pytest.fixture
def led(run, tmp_path: Path, world: World) -> Path:
    d = tmp_path / "led"
    d.mkdir()
    assert run("init", cwd=d).code == 0
    assert run("target", "add", "demo", "--github", REPO, "--base", world.base, cwd=d).code == 0
    return d


def test_a_pr_list_becomes_entries_that_fetch_pins(run, led: Path, tmp_path: Path, world, serve_hub, monkeypatch):
    listing = tmp_path / "Dockerfile.prs"
    listing.write_text(
        "# PRs we carry\n"
        'ARG PRS="101"\n'
        "RUN curl -L https://github.com/acme/demo/pull/102.diff | git apply\n"
        "EXPOSE 8000\n"
    )
    r = run("import", "--pr", listing, "--target", "demo", "--json", cwd=led)
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    assert rep["added"] == ["pr-101", "pr-102"] and rep["not_fetched"] == ["pr-101", "pr-102"]
    ledger = load_ledger(led / "patches.toml")
    p = ledger.get("pr-101")
    assert (p.origin, p.upstream.prs, p.source.kind, p.source.ref) == ("upstream", [f"{REPO}#101"], "pr", f"{REPO}#101")
    r = run("list", "--json", cwd=led)
    assert {row["id"]: row["body"] for row in json.loads(r.stdout)} == {
        "pr-101": "not imported",
        "pr-102": "not imported",
    }
    # offline: recorded as not fetched, nothing written
    before = tree_digest(led)
    r = run("fetch", "--all", "--offline", "--json", cwd=led)
    assert r.code == 1 and "offline" in r.stdout, r
    assert tree_digest(led) == before
    # the same list again adds nothing; a number on the command line works too
    r = run("import", "--pr", "101", "--pr", "#102", "--target", "demo", "--json", cwd=led)
    assert r.code == 0 and json.loads(r.stdout)["unchanged"] == ["pr-101", "pr-102"], r
    # online: fetch pins each to its PR's head, and the series applies
    hub = serve_hub(hub_data(world))
    monkeypatch.setenv("PATCHSET_GITHUB_API", hub.base_url)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    r = run("fetch", "--all", "--json", cwd=led)
    assert r.code == 0, r
    lock = (led / "patches.lock").read_text()
    assert "[heads]" in lock and "pr-101" in lock.split("[heads]")[1]
    tree = base_tree(world, tmp_path / "tree")
    r = run("apply", "--tree", tree, "--update-lock", cwd=led)
    assert r.code == 0, r
    assert "core_3 = 30  # fixed upstream" in (tree / "demo/core.py").read_text()


@pytest.mark.parametrize(
    ("value", "said"),
    [("lots", "not a PR number"), ("0", "positive integer")],
)
def test_a_bad_pr_is_refused(run, led: Path, value: str, said: str) -> None:
    before = tree_digest(led)
    r = run("import", "--pr", value, "--target", "demo", cwd=led)
    assert r.code == 2 and said in r.stderr, r
    assert tree_digest(led) == before


@pytest.mark.parametrize(
    "url",
    [
        "https://gitlab.com/acme/demo/pull/102",  # another forge, the same owner/repo
        "https://evil.example/pull/102",  # no owner/repo at all: was read as the target's own #102
        "https://github.com.evil.io/acme/demo/pull/102",  # a lookalike host
        "https://notgithub.com/acme/demo/pull/102",
    ],
)
def test_a_pull_url_on_another_host_is_refused(run, led: Path, tmp_path: Path, url: str) -> None:
    """Before: every one of these was recorded as ``pr-102``, the target's own PR #102."""
    before = tree_digest(led)
    r = run("import", "--pr", url, "--target", "demo", cwd=led)
    assert r.code == 2 and "not on github.com" in r.stderr and "nothing was imported" in r.stderr, r
    assert "Traceback" not in r.stderr and tree_digest(led) == before
    listing = tmp_path / "Dockerfile.prs"  # in a list: the file and the line
    listing.write_text(f'ARG PRS="101"\nRUN curl -L {url}.diff | git apply\n')
    r = run("import", "--pr", listing, "--target", "demo", cwd=led)
    assert r.code == 2 and f"{listing}:2" in r.stderr and "not on github.com" in r.stderr, r
    assert tree_digest(led) == before
    r = run("import", "--pr", f"https://github.com/{REPO}/pull/102", "--target", "demo", "--json", cwd=led)
    assert r.code == 0 and json.loads(r.stdout)["added"] == ["pr-102"], r  # the upstream's own host


def test_a_target_upstream_elsewhere_takes_its_own_hosts_pull_urls(run, tmp_path: Path) -> None:
    d = tmp_path / "led"
    d.mkdir()
    assert run("init", cwd=d).code == 0
    assert run("target", "add", "mirror", "--upstream", "https://git.example.org/acme/demo.git", cwd=d).code == 0
    r = run("import", "--pr", "https://git.example.org/acme/demo/pull/7", "--target", "mirror", "--json", cwd=d)
    assert r.code == 0 and json.loads(r.stdout)["added"] == ["pr-acme-demo-7"], r
    r = run("import", "--pr", "https://github.com/acme/demo/pull/8", "--target", "mirror", cwd=d)
    assert r.code == 2 and "not on git.example.org" in r.stderr, r


def test_fetch_refuses_a_pull_url_source_on_another_host(run, led: Path) -> None:
    toml = led / "patches.toml"
    toml.write_text(
        toml.read_text()
        + '\n[[patch]]\nid = "theirs"\ntarget = "demo"\ntitle = "t"\norigin = "upstream"\n'
        + '[patch.source]\nkind = "pr"\nref = "https://gitlab.com/acme/demo/pull/3"\n'
    )
    before = tree_digest(led)
    r = run("fetch", "theirs", "--offline", cwd=led)
    assert r.code == 2 and "pull request on gitlab.com" in r.stderr and "patches.toml:" in r.stderr, r
    assert tree_digest(led) == before


def test_a_revert_is_the_reverse_of_the_upstream_commit(run, led: Path, tmp_path: Path, world: World) -> None:
    r = run(
        "import", "--revert", world.commit_sha[:10], "--upstream", world.root, "--target", "demo", "--json", cwd=led
    )
    assert r.code == 0, r
    rep = json.loads(r.stdout)
    pid = rep["id"]
    assert rep["files"] == ["demo/extra.py"] and rep["subject"] == "commit"
    p = load_ledger(led / "patches.toml").get(pid)
    assert (p.origin, p.upstream.commits) == ("revert", [world.commit_sha])
    # the oracle: git revert of the same commit on a clone at HEAD
    oracle = tmp_path / "oracle"
    git(tmp_path, "clone", "-q", str(world.root), str(oracle))
    git(oracle, "revert", "--no-edit", world.commit_sha)
    tree = tmp_path / "tree"
    git(tmp_path, "clone", "-q", str(world.root), str(tree))
    shutil.rmtree(tree / ".git")
    r = run("apply", "--tree", tree, "--update-lock", cwd=led)
    assert r.code == 0, r
    got = {k: v for k, v in tree_digest(tree).items()}
    want = {k: v for k, v in tree_digest(oracle).items()}
    assert got == want
    # a sha the clone does not have
    r = run("import", "--revert", "deadbeef", "--upstream", world.root, "--target", "demo", cwd=led)
    assert r.code == 2 and "is not in" in r.stderr, r


def test_a_build_script_given_to_pr_yields_only_its_prs(run, led: Path, tmp_path: Path):
    """Issue 33: a Dockerfile's settings (``ARG MAX_JOBS=4``, ``head_ready=0``) are not PRs and do not
    abort the import; PR URLs, ``#N``, ``OWNER/REPO#N`` and numbers alone on a line (or under a
    variable named for PRs) are."""
    listing = tmp_path / "Dockerfile"
    listing.write_text(
        "FROM nvcr.io/nvidia/pytorch:25.09-py3\n"
        "ARG MAX_JOBS=4\n"
        "ARG CUDA_ARCH=121\n"
        "RUN head_ready=0; until [ $head_ready = 1 ]; do sleep 1; done\n"
        "ENV NCCL_IB_DISABLE=1\n"
        "RUN curl -L https://github.com/acme/demo/pull/102.diff | git apply\n"
        "# carried: acme/demo#103\n"
        "RUN git fetch origin pull/104/head  # #105\n"
        "106\n"
        'ARG VLLM_PRS="107 108"\n'
        "EXPOSE 8000\n"
    )
    r = run("import", "--pr", listing, "--target", "demo", "--json", cwd=led)
    assert r.code == 0, r
    assert json.loads(r.stdout)["added"] == ["pr-102", "pr-104", "pr-105", "pr-106", "pr-107", "pr-108"], r


def test_pr_after_init_without_a_target_names_the_choices(run, tmp_path: Path):
    d = tmp_path / "bare"
    d.mkdir()
    assert run("init", cwd=d).code == 0
    r = run("import", "--pr", "31000", cwd=d)
    assert r.code == 2 and "one of: )" not in r.stderr and "patchset target add" in r.stderr, r
    assert run("target", "add", "vllm", cwd=d).code == 0 and run("target", "add", "nccl", cwd=d).code == 0
    r = run("import", "--pr", "31000", cwd=d)
    assert r.code == 2 and "one of: nccl, vllm" in r.stderr, r
