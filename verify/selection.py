"""Which tests ``patchset verify`` runs: tags, test names, the target, and a test table's sanity.

Why this module exists: the gate and the CI matrix script select tests by the same rule as verify
(``selected``), without loading the runner.
"""

from __future__ import annotations

from patchset.errors import InputError, Location
from patchset.ledger.model import Ledger, Patch, Target, TestSpec


def selected(test: TestSpec, tags: list[str]) -> bool:
    """A test runs when no tags were asked for, or when it carries one of them."""
    return not tags or bool(set(test.tags) & set(tags))


def test_name(test: TestSpec, index: int) -> str:
    return test.name or f"test{index + 1}"


def check_spec(ledger: Ledger, patch: Patch, test: TestSpec, name: str) -> None:
    where = Location(ledger.path, patch.line or None, f"patch {patch.id}: tests {name}")
    if test.kind in ("longctx", "serving"):
        return  # resolve_spec checks it
    if not test.command.strip():
        raise InputError("test command is empty", where=where)
    parts = [p for p in test.cwd.replace("\\", "/").split("/") if p not in ("", ".")]
    if test.cwd.startswith("/") or ".." in parts:
        raise InputError(
            f"test cwd {test.cwd!r} leaves the build tree",
            where=where,
            hint="cwd is a directory inside the build tree, e.g. '.' or 'tests'",
        )
    if test.timeout <= 0:
        raise InputError(f"test timeout {test.timeout} is not a positive number of seconds", where=where)


def choose_target(ledger: Ledger, target: str | None, tags: list[str]) -> Target:
    if target:
        if target not in ledger.targets:
            raise InputError(f"unknown target {target!r}", hint=f"one of: {', '.join(ledger.targets) or '(none)'}")
        return ledger.targets[target]
    with_tests = [
        name for name in ledger.targets if any(selected(t, tags) for p in ledger.series(name) for t in p.tests)
    ]
    if len(with_tests) == 1:
        return ledger.targets[with_tests[0]]
    if not with_tests:
        declared = sorted({tag for p in ledger.series() for t in p.tests for tag in t.tags})
        if not any(p.tests for p in ledger.series()):
            raise InputError(
                f"no active patch in {ledger.path} declares a test",
                hint="add [[patch.tests]] tables (command, cwd, env, tags, timeout) to the ledger",
            )
        raise InputError(
            f"no test carries the tags {', '.join(tags)}",
            hint=f"tags used in the ledger: {', '.join(declared) or '(none)'}",
        )
    raise InputError(
        f"tests of several targets are selected: {', '.join(with_tests)}",
        hint="verify one target at a time (pass the target name)",
    )
