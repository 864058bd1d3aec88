"""Shared fixtures: a CLI runner, throwaway ledgers and real git repositories.\n\nPlain helpers (git, repository builders, digests) live in ``tests/support/repo.py``; test modules\nimport them from there, never from here or from each other."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import ownstate
from tests.support.cli import invoke
from tests.support.repo import REPO_ROOT, git, tree_digest
from tests.support.tiers import ci_verdict

pytest_plugins = ["tests.support.checkout"]  # fails the session when a test wrote into the checkout


@pytest.fixture(autouse=True, scope="session")
def _own_state(tmp_path_factory):
    """The session's own patchset cache and state and XDG directories (``tests.support.ownstate``):
    what the user's earlier runs left (histories, listings, the journal key) changes nothing here,
    and no test writes there. Only verified downloads and the engine venvs are shared."""
    with pytest.MonkeyPatch.context() as mp:
        shared = ownstate.redirect(tmp_path_factory.mktemp("own-state"), mp)
        yield
        wrote = ownstate.check_shared(shared)
    if wrote:
        pytest.fail(f"a test wrote into downloads shared with the user's cache: {', '.join(wrote)}")


@pytest.fixture
def run():
    """Invoke the patchset CLI in-process; returns exit code, stdout, stderr."""
    return invoke


@pytest.fixture
def git_run():
    return git


@pytest.fixture
def digest():
    return tree_digest


MINI_LEDGER = """\
# a comment a human wrote
schema = 1

[targets.demo]
upstream = "https://example.invalid/demo.git"
github = "example/demo"
strip = 1
"""


@pytest.fixture
def ledger_dir(tmp_path: Path) -> Path:
    d = tmp_path / "ledger"
    d.mkdir()
    (d / "patches.toml").write_text(MINI_LEDGER)
    return d


@pytest.fixture
def real_ledger(tmp_path: Path) -> Path:
    d = tmp_path / "real"
    d.mkdir()
    shutil.copy(REPO_ROOT / "patches.toml", d / "patches.toml")
    return d


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> tuple[Path, list[str]]:
    """``(repo, [c0 .. c9])``: the gate tests' upstream, a linear main with squash-merge subjects."""
    from tests.support.gateworld import build_upstream

    return build_upstream(tmp_path_factory.mktemp("upstream"))


@pytest.fixture
def serve_hub():
    """``serve_hub(data)``: a local GitHub-shaped server (``tests.support.fakehub``) on ``data``,
    stopped when the test ends. Each test module builds the world it needs and serves it here."""
    from contextlib import ExitStack

    from tests.support.fakehub.server import FakeHub

    with ExitStack() as stack:
        yield lambda data, **kw: stack.enter_context(FakeHub(data, **kw))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a skipped test fails the run unless its tier is named off (tests/support/tiers.py)."""
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    why = ci_verdict(reason.removeprefix("Skipped: "))
    if why:
        report.outcome = "failed"
        report.longrepr = why
