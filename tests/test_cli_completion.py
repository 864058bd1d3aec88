"""Shell completion (issue 24): click's ``_PATCHSET_COMPLETE=bash_source|zsh_source|fish_source``
script, which completes commands and options, patch ids (``show``, ``fetch``, ``--only``) and
target names (``--target``) from the ledger of the current directory, ``-C`` or ``--ledger``. A
broken or missing ledger completes nothing and prints nothing. Run as the real process: click's
completion lives in its standalone ``main``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.repo import REPO_ROOT

LEDGER = """\
schema = 1
[targets.vllm]
upstream = "https://example.invalid/vllm.git"
[targets.flashinfer]
upstream = "https://example.invalid/fi.git"

[[patch]]
id = "u101-fix-cap"
target = "vllm"
title = "fix the cap"
origin = "ours"

[[patch]]
id = "u202-gate"
target = "vllm"
title = "the gate"
origin = "ours"

[[patch]]
id = "fi-01-tile"
target = "flashinfer"
title = "tile"
origin = "ours"
"""


def complete(words: str, cwd: Path, shell: str = "bash") -> subprocess.CompletedProcess[str]:
    """What the shell's completion function gets for the command line ``words`` (the cursor at
    its end: a trailing space completes a new word)."""
    parts = words.split()
    cword = len(parts) if words.endswith(" ") else len(parts) - 1
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "_PATCHSET_COMPLETE": f"{shell}_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(cword),
    }
    env.pop("PATCHSET_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-c", "from patchset.cli import main; main()"],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )


def values(r: subprocess.CompletedProcess[str]) -> list[str]:
    assert r.returncode == 0 and r.stderr == "", r
    return [ln.split(",", 1)[1] for ln in r.stdout.splitlines() if ln]


@pytest.fixture
def led(tmp_path: Path) -> Path:
    d = tmp_path / "led"
    d.mkdir()
    (d / "patches.toml").write_text(LEDGER)
    return d


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_documented_setup_prints_a_script(tmp_path: Path, shell: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "_PATCHSET_COMPLETE": f"{shell}_source"}
    r = subprocess.run(
        [sys.executable, "-c", "from patchset.cli import main; main()"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0 and "_PATCHSET_COMPLETE" in r.stdout, r
    assert "_patchset_completion" in r.stdout or "__fish_patchset_complete" in r.stdout, r.stdout


def test_commands_complete(led: Path) -> None:
    assert {"recover", "rebase"} <= set(values(complete("patchset re", led)))
    assert values(complete("patchset al", led)) == ["allow"]
    assert {"--yes", "--list", "--revoke", "--json"} <= set(values(complete("patchset allow --", led)))


def test_patch_ids_complete_from_the_ledger_here(led: Path) -> None:
    assert values(complete("patchset show ", led)) == ["u101-fix-cap", "u202-gate", "fi-01-tile"]
    assert values(complete("patchset show u2", led)) == ["u202-gate"]
    assert values(complete("patchset fetch --only u", led)) == ["u101-fix-cap", "u202-gate"]
    assert values(complete("patchset gate --only fi", led)) == ["fi-01-tile"]
    assert values(complete("patchset fetch --update fi", led)) == ["fi-01-tile"]


def test_target_names_complete(led: Path) -> None:
    assert values(complete("patchset apply --target ", led)) == ["vllm", "flashinfer"]
    assert values(complete("patchset list --target f", led)) == ["flashinfer"]
    assert values(complete("patchset build wheel --target v", led)) == ["vllm"]


def test_C_and_ledger_name_the_ledger(led: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert values(complete("patchset show ", elsewhere)) == []
    assert values(complete(f"patchset -C {led} show u1", elsewhere)) == ["u101-fix-cap"]
    assert values(complete("patchset -C ../led show u1", elsewhere)) == ["u101-fix-cap"]
    (led / "patches.toml").rename(led / "other.toml")
    assert values(complete(f"patchset --ledger {led / 'other.toml'} verify --target ", elsewhere)) == [
        "vllm",
        "flashinfer",
    ]
    assert values(complete(f"patchset -C {led} --ledger other.toml show fi", elsewhere)) == ["fi-01-tile"]


@pytest.mark.parametrize(
    "text",
    [
        "schema = 1\n[targets.vllm\n",  # TOML syntax
        "schema = 99\n",  # an unknown schema
        '[[patch]]\nid = "x"\n',  # no schema, a patch of no target
        "\x00\xff\xfe binary",
    ],
)
def test_a_broken_ledger_completes_nothing_and_prints_nothing(led: Path, text: str) -> None:
    (led / "patches.toml").write_bytes(text.encode("latin-1"))
    for words in ("patchset show ", "patchset apply --target ", "patchset fetch --only "):
        r = complete(words, led)
        assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr == "", (words, r)


def test_a_ledger_that_is_a_directory_completes_nothing(led: Path) -> None:
    (led / "patches.toml").unlink()
    (led / "patches.toml").mkdir()
    r = complete("patchset show ", led)
    assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr == "", r


def test_zsh_gets_the_title_as_help(led: Path) -> None:
    r = complete("patchset show u1", led, shell="zsh")
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.splitlines() == ["plain", "u101-fix-cap", "fix the cap"]
