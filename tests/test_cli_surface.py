"""The command surface scripts rely on: every command exists, has --help, and machine output."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from tests.support.cli import leaf_commands
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


def _leaf_commands() -> dict[str, click.Command]:
    return leaf_commands()


def test_an_option_reads_the_same_in_every_command() -> None:
    """Options are declared once (``patchset.clicmds.options``): an option name shows one metavar
    (or is a flag) in every command's --help that has it."""
    shown: dict[str, dict[str, str]] = {}
    for name, cmd in _leaf_commands().items():
        ctx = click.Context(cmd)
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden:
                form = "a flag" if p.is_flag else p.make_metavar(ctx)
                for opt in p.opts:
                    shown.setdefault(opt, {})[name] = form
    assert len(shown["--target"]) >= 10 and len(shown["--tree"]) >= 5  # the walk sees the commands
    differ = {opt: forms for opt, forms in shown.items() if len(set(forms.values())) > 1}
    assert differ == {}


def test_commands_use_only_public_helpers_of_cli() -> None:
    import ast

    private = []
    for path in sorted((REPO_ROOT / "patchset" / "clicmds").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "patchset.cli":
                private += [f"{path.name}: {a.name}" for a in node.names if a.name.startswith("_")]
            named = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "cli"
            if named and node.attr.startswith("_"):
                private.append(f"{path.name}:{node.lineno}: cli.{node.attr}")
    assert private == []
