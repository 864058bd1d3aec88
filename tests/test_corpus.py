"""The Debian corpus: real quilt series (bookworm) applied, exported, pushed with quilt and rebased onto
trixie, held against ``dpkg-source -x`` and against what Debian's maintainers did.

Tiers: the default run checks the small packages (``debian.SMALL``); ``pytest -m corpus`` checks all
ten (bash, coreutils, tar, nginx, openssh, curl, openssl, vim, python3.11, glibc). Packages come
through apt's ``deb-src`` lines (``.ci/run`` adds them) and are cached under the patchset cache;
every test skips, saying why, when apt, dpkg-source or the package cannot be had.
``bench/corpus.py`` runs the same checks with timings and writes ``docs/corpus.md``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import debian

# python3.11 has no trixie counterpart (trixie ships python3.13): no rebase row
REBASE = [p for p in debian.PACKAGES if p != "python3.11"]


def _source(pkg: str, suite: str) -> debian.Source:
    missing = debian.tools_missing()
    if missing:
        pytest.skip(f"Debian corpus: {missing}")
    try:
        return debian.extract(pkg, suite)
    except debian.Unavailable as exc:
        pytest.skip(f"Debian corpus: {exc}")


def _check_apply(pkg: str, tmp_path: Path) -> None:
    src = _source(pkg, "bookworm")
    c = debian.check_apply(src, tmp_path, timing=False)
    assert c.patches == len(src.series) and c.patches > 0
    assert c.identical, f"{pkg}: patchset apply vs dpkg-source -x: {c.diffs[:10]}"
    assert c.roundtrip_identical, f"{pkg}: import -> export: {c.roundtrip_diffs[:10]}"
    if c.quilt_identical is not None:
        assert c.quilt_identical, f"{pkg}: export -> quilt push -a vs dpkg-source -x: {c.quilt_diffs[:10]}"


def _check_rebase(pkg: str, tmp_path: Path) -> None:
    old, new = _source(pkg, "bookworm"), _source(pkg, "trixie")
    r = debian.check_rebase(old, new, tmp_path)
    assert len(r.rows) == len(old.series)
    assert r.false_upstream == [], f"{pkg}: patchset says already upstream, Debian kept: {r.false_upstream}"
    assert not r.unequal, f"{pkg}: carried result differs from trixie: {r.unequal[:10]}"


@pytest.mark.corpus  # and in the default run (not slow): the CI tier
@pytest.mark.parametrize("pkg", debian.SMALL)
def test_small_package_applies_like_dpkg_source(pkg: str, tmp_path: Path) -> None:
    _check_apply(pkg, tmp_path)


@pytest.mark.corpus
def test_small_package_rebase_agrees_with_debian(tmp_path: Path) -> None:
    _check_rebase("tar", tmp_path)


@pytest.mark.corpus
@pytest.mark.slow
@pytest.mark.parametrize("pkg", [p for p in debian.PACKAGES if p not in debian.SMALL])
def test_package_applies_like_dpkg_source(pkg: str, tmp_path: Path) -> None:
    _check_apply(pkg, tmp_path)


@pytest.mark.corpus
@pytest.mark.slow
@pytest.mark.parametrize("pkg", [p for p in REBASE if p != "tar"])
def test_package_rebase_agrees_with_debian(pkg: str, tmp_path: Path) -> None:
    _check_rebase(pkg, tmp_path)
