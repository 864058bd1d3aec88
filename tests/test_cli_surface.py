"""The command surface scripts rely on: every command exists, has --help, and machine output."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.repo import REPO_ROOT

COMMANDS = [
    "init",
    "import",
    "export",
    "validate",
    "audit",
    "list",
    "show",
    "apply",
    "rebase",
    "status",
    "fetch",
    "verify",
    "gate",
    "recover",
    "allow",
    "target add",
    "build wheel",
    "build overlay",
    "base detect",
]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help_and_json(run, name: str) -> None:
    r = run(*name.split(), "--help")
    assert r.code == 0, r
    assert "--json" in r.stdout


def test_check_longctx_help(run) -> None:
    r = run("check", "longctx", "--help")
    assert r.code == 0 and "--url" in r.stdout and "--json" in r.stdout


def test_python_cli_py_works_and_bad_option_exits_2(tmp_path) -> None:
    r = subprocess.run(
        [sys.executable, str(REPO_ROOT / "cli.py"), "-C", str(REPO_ROOT), "list", "--json"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and '"u58021-single-group-prefix-match-unit"' in r.stdout
    r = subprocess.run(
        [sys.executable, str(REPO_ROOT / "cli.py"), "apply", "--no-such-flag"], capture_output=True, text=True
    )
    assert r.returncode == 2 and "No such option" in r.stderr


def test_unreachable_server_is_exit_2_not_a_traceback(run) -> None:
    r = run("check", "longctx", "--url", "http://127.0.0.1:9")
    assert r.code == 2 and "cannot reach" in r.stderr and "Traceback" not in r.stderr
