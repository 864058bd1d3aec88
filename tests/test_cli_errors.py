"""What a script and a person get when a command fails (issue 24): under ``--json`` every error is
``{"error": {"kind", "message", "hint", "exit"}}`` on stdout with the exit code unchanged (domain
errors, click's usage errors, an unknown command), ``-V`` is ``--version``, and a mistyped command
names the command that was meant."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from patchset import __version__
from tests.support.repo import REPO_ROOT


def error_of(r) -> dict:
    data = json.loads(r.stdout)
    assert set(data) == {"error"}, data
    err = data["error"]
    assert set(err) == {"kind", "message", "hint", "exit"}, err
    assert err["exit"] == r.code, (err, r)
    return err


def test_a_domain_error_under_json_is_an_object_on_stdout(run, tmp_path: Path) -> None:
    (tmp_path / "patches.toml").write_text("schema = 1\n[targets.lib]\nupstream = 'u'\n")
    r = run("apply", "--tree", tmp_path, "--json", cwd=tmp_path)
    assert r.code == 2
    err = error_of(r)
    assert err["kind"] == "input_error"
    assert "no active patches" in err["message"] and "patchset import" in err["hint"]
    assert "no active patches" in r.stderr  # a person reading the terminal still sees it


def test_a_malformed_ledger_under_json(run, tmp_path: Path) -> None:
    (tmp_path / "patches.toml").write_text("schema = 1\n[targets.lib\n")
    r = run("validate", "--json", cwd=tmp_path)
    assert r.code == 2
    err = error_of(r)
    assert err["kind"] == "ledger_error" and "patches.toml:2" in err["message"]


def test_without_json_stdout_stays_empty(run, tmp_path: Path) -> None:
    (tmp_path / "patches.toml").write_text("schema = 1\n[targets.lib\n")
    r = run("validate", cwd=tmp_path)
    assert r.code == 2 and r.stdout == "" and r.stderr.startswith("error: ")


@pytest.mark.parametrize(
    "args, words",
    [
        (["apply", "--no-such-flag", "--json"], "No such option"),
        (["apply", "--fuzz", "many", "--json"], "'many' is not a valid integer"),
        (["show", "--json"], "Missing argument"),
        (["--json-x", "list", "--json"], "No such option"),
        (["lst", "--json"], "No such command"),
    ],
)
def test_a_usage_error_under_json(run, args: list[str], words: str) -> None:
    r = run(*args)
    assert r.code == 2
    err = error_of(r)
    assert err["kind"] == "usage" and words in err["message"], err
    assert words in r.stderr


def test_a_usage_error_without_json_is_clicks_own(run) -> None:
    r = run("apply", "--no-such-flag")
    assert r.code == 2 and r.stdout == "" and "No such option" in r.stderr and "Usage:" in r.stderr


def test_an_internal_error_under_json(run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from patchset.commands import inspection

    def boom(*a, **k):
        raise ZeroDivisionError("no")

    monkeypatch.setattr(inspection, "validate", boom)
    monkeypatch.delenv("PATCHSET_DEBUG", raising=False)
    (tmp_path / "patches.toml").write_text("schema = 1\n")
    r = run("validate", "--json", cwd=tmp_path)
    err = error_of(r)
    assert err["kind"] == "internal" and "ZeroDivisionError" in err["message"] and "PATCHSET_DEBUG" in err["hint"]


def test_a_finding_keeps_its_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    """A HashMismatch (exit 1) is a finding: the JSON names it and the exit code stays 1."""
    from patchset import cli, errors

    @cli.guarded
    def body(as_json: bool) -> int:
        raise errors.HashMismatch("x differs", hint="re-run")

    with pytest.raises(SystemExit) as exc:
        body(as_json=True)
    assert exc.value.code == 1
    got = json.loads(capsys.readouterr().out)
    assert got == {"error": {"kind": "hash_mismatch", "message": "x differs", "hint": "re-run", "exit": 1}}


def test_dash_V_is_the_version(run) -> None:
    for flag in ("-V", "--version"):
        r = run(flag)
        assert r.code == 0 and __version__ in r.stdout, r


@pytest.mark.parametrize(
    "typo, meant", [("lst", "list"), ("aply", "apply"), ("verfy", "verify"), ("recovr", "recover")]
)
def test_a_mistyped_command_names_the_one_meant(run, typo: str, meant: str) -> None:
    r = run(typo)
    assert r.code == 2
    assert f"No such command '{typo}'" in r.stderr and f"Did you mean '{meant}'?" in r.stderr, r


def test_a_mistyped_subcommand_too(run) -> None:
    r = run("build", "whel")
    assert r.code == 2 and "Did you mean 'wheel'?" in r.stderr, r


def test_nothing_close_suggests_nothing(run) -> None:
    r = run("xyzzy")
    assert r.code == 2 and "No such command 'xyzzy'" in r.stderr and "Did you mean" not in r.stderr


def test_the_console_script_reports_json_usage_errors_too(tmp_path: Path) -> None:
    """The real process (click's standalone mode), not only the test runner."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    r = subprocess.run(
        [sys.executable, "-c", "from patchset.cli import main; main()", "apply", "--bogus", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 2
    assert json.loads(r.stdout)["error"]["kind"] == "usage"
