"""The command reference cannot drift from the command line (issue 24): every command click knows
has one row in docs/commands.md, and each row names exactly that command's options (no missing
one, no stale one); the global options, the exit codes and the completion setup are there; every
``PATCHSET_*`` variable the product's files mention is listed in docs/environment.md (a variable
added anywhere in ``patchset/``, ``tracker/``, ``verify/`` or ``ci/`` fails this test until the docs
say what it is); and the README keeps the quickstart and the test command CI runs (issue 32)."""

from __future__ import annotations

import re

import click
import pytest

from patchset import cli
from tests.support.cli import leaf_commands
from tests.support.repo import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()
COMMANDS = (REPO_ROOT / "docs" / "commands.md").read_text()
ENVIRONMENT = (REPO_ROOT / "docs" / "environment.md").read_text()
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[A-Za-z])(?![\w-])")
EVERYWHERE = {"--json", "-h", "--help"}  # documented once, above the table


def section(title: str, text: str = COMMANDS) -> str:
    start = text.index(f"\n{title}\n")
    level = title.split(" ")[0]
    rest = text[start + len(title) + 2 :]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", rest, re.MULTILINE)]
    return rest[: ends[0]] if ends else rest


def commands() -> dict[str, click.Command]:
    return leaf_commands()


def options(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params if isinstance(p, click.Option) and not p.hidden for o in p.opts} - EVERYWHERE


def rows() -> dict[str, str]:
    """``{command path: its synopsis}`` from the reference table (first cell of each row)."""
    names = sorted(commands(), key=len, reverse=True)
    table = section("## Command reference").split("| command | what it does |", 1)[1]
    out: dict[str, str] = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("| `"):
            break
        synopsis = line[3:].split("` |", 1)[0].replace("\\|", "|")
        name = next((n for n in names if synopsis == n or synopsis.startswith(n + " ")), None)
        assert name is not None, f"docs/commands.md row for no command: {synopsis}"
        assert name not in out, f"two docs/commands.md rows for {name}"
        out[name] = synopsis
    return out


def test_every_command_has_a_row() -> None:
    assert set(rows()) == set(commands())


@pytest.mark.parametrize("name", sorted(commands()))
def test_a_row_names_exactly_the_commands_options(name: str) -> None:
    cmd = commands()[name]
    documented = set(OPTION.findall(rows()[name][len(name) :]))
    assert documented == options(cmd), (
        f"{name}: docs/commands.md has {sorted(documented)}, click {sorted(options(cmd))}"
    )
    assert {"--json", "-h", "--help"} <= {o for p in cmd.params for o in p.opts} | {"-h", "--help"}


def test_the_global_options_are_documented() -> None:
    ref = section("## Global options")
    ctx = cli.main.make_context("patchset", [], resilient_parsing=True)
    top = {o for p in cli.main.get_params(ctx) if isinstance(p, click.Option) for o in p.opts}
    assert top == {"-C", "--ledger", "-V", "--version", "-h", "--help"}
    first = ref.strip().split("\n\n", 1)[0]
    assert top <= set(OPTION.findall(first)), first
    assert "`--json`" in first and '{"error": {"kind", "message", "hint", "exit"}}' in first


def test_exit_codes_and_completion_are_documented() -> None:
    codes = section("## Exit codes")
    assert [ln.split("|")[1].strip() for ln in codes.splitlines() if re.match(r"\| \d+ \|", ln)] == [
        "0",
        "1",
        "2",
        "130",
    ]
    done = section("## Shell completion")
    for shell in ("bash", "zsh", "fish"):
        assert f"_PATCHSET_COMPLETE={shell}_source patchset" in done


def product_variables() -> set[str]:
    """What ``grep -rhoE "PATCHSET_[A-Z0-9_]+" patchset tracker verify ci`` finds (every file)."""
    found: set[str] = set()
    for top in ("patchset", "tracker", "verify", "ci"):
        for path in (REPO_ROOT / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                found |= set(re.findall(r"PATCHSET_[A-Z0-9_]+", path.read_text(errors="replace")))
    return {name for name in found if not name.endswith("_")}  # a prefix the code completes is no variable


def test_every_environment_variable_is_listed() -> None:
    found = product_variables()
    assert {"PATCHSET_CACHE", "PATCHSET_FSYNC", "PATCHSET_DEBUG"} <= found  # the scan works
    table = section("## Environment variables", ENVIRONMENT)
    listed = set(re.findall(r"`_?(PATCHSET_[A-Z0-9_]+)`", table))
    assert sorted(found - listed) == []


def test_the_readme_keeps_the_quickstart_and_the_test_command() -> None:
    """What a newcomer copies from the README: the two quickstart lines, and the test command CI runs."""
    quick = section("## Quickstart", README)
    assert "\npip install -e .\n" in quick
    assert "\npatchset -C examples/spark-sm12x apply --from-index vllm==0.30.0 --into /tmp/vllm-patched\n" in quick
    assert "\npip install -e '.[test]' && python -m pytest -m \"not slow\"\n" in section("## Tests", README)
    trust = " ".join(section("## Trust", README).split())
    assert "run only after you ran `patchset allow` on them as they are now" in trust
