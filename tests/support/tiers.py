"""Test tiers that need something set up (an engine, a browser, the package index…) and how CI
treats a tier that is missing.

Locally a test whose tier cannot be set up skips with its reason. Under ``CI=true`` a skip is a
failure (conftest's report hook calls :func:`ci_verdict`): a green CI run means every tier ran.
A tier is switched off only by naming it in ``PATCHSET_TIERS_OFF`` with a reason —
``PATCHSET_TIERS_OFF="chromium=no browser on this runner; engine=disk too small"`` — and the
reason is printed in the log (``.ci/run`` echoes the variable; the pytest summary lists the skip).
"""

from __future__ import annotations

import os
import re

# (tier, what a skip reason of that tier says): the first match names the tier.
TIERS: list[tuple[str, re.Pattern[str]]] = [
    ("network", re.compile(r"package index unreachable|network test|build backend could not be installed")),
    ("engine", re.compile(r"engine|vllm|vLLM", re.I)),
    ("debian", re.compile(r"Debian corpus|quilt is not installed|dpkg")),
    ("chromium", re.compile(r"chromium", re.I)),
    ("specs", re.compile(r"GraphQL schema|OpenAPI|PyGithub's recorded|graphql-core|jsonschema")),
    ("tmpfs", re.compile(r"tmpfs")),
    ("namespaces", re.compile(r"user namespaces|network namespace")),
    (
        "tools",
        re.compile(r"GNU patch|needs GNU patch|hadolint|shellcheck|actionlint|patchset command is not installed"),
    ),
]


def tier_of(reason: str) -> str:
    """The tier a skip reason belongs to (``other`` when none matches)."""
    return next((name for name, pattern in TIERS if pattern.search(reason)), "other")


def tiers_off(value: str | None = None) -> dict[str, str]:
    """``PATCHSET_TIERS_OFF`` parsed: ``{"chromium": "no browser on this runner"}``.

    A tier named without a reason is not off: the reason is what makes the choice visible.
    """
    value = os.environ.get("PATCHSET_TIERS_OFF", "") if value is None else value
    out: dict[str, str] = {}
    for item in value.split(";"):
        name, sep, why = item.partition("=")
        if sep and name.strip() and why.strip():
            out[name.strip()] = why.strip()
    return out


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def ci_verdict(reason: str) -> str | None:
    """``None`` when a skip with ``reason`` may stay a skip; else why it fails the run."""
    if not under_ci():
        return None
    tier = tier_of(reason)
    off = tiers_off()
    if tier in off:
        return None
    return (
        f"under CI=true a test of tier {tier!r} may not skip ({reason}); set it up, or name it as off "
        f"with a reason: PATCHSET_TIERS_OFF='{tier}=<why>'"
    )
