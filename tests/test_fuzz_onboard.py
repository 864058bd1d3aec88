"""Fuzz tier for onboarding input (issue #25): hostile overlay manifests, PR lists and diff names.

An overlay manifest is someone else's JSON: its ``overlay_file`` and ``site_packages_target`` are
drawn from hostile shapes (``../``, absolute paths, the Sentinel's own path, NUL and control
characters, ``.git``, very long names, non-strings) and the kit holds a symlink out of it; every
case goes through the product's ``import_overlay`` and must end within ``CASE_DEADLINE_S``, write
nothing outside the ledger directory (a Sentinel sits where ``../sentinel/...`` lands) and raise
nothing but patchset's domain exceptions. PR lists and diff file names get random text the same
way (``pr_refs``, ``infer``, ``reroot``).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchset.commands.diffroot import infer, reroot
from patchset.commands.overlay_import import import_overlay
from patchset.commands.upstream_import import pr_refs
from patchset.errors import PatchsetError
from patchset.ledger.model import Target
from patchset.ledger.store import init_ledger
from tests.support.fuzz import CASE_DEADLINE_S, Sentinel, examples, snapshot

pytestmark = pytest.mark.timeout(600)
FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


class Overtime(BaseException):
    """A case ran past CASE_DEADLINE_S (BaseException: no ``except Exception`` may swallow it)."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise Overtime(f"a case did not end within {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


HOSTILE = st.sampled_from(
    [
        "../sentinel/victim.txt",
        "../../sentinel/etc/passwd",
        "/etc/passwd",
        "vllm/../../sentinel/victim.txt",
        "vllm/x.py\x00.txt",
        "vllm/\x1b[31mred.py",
        ".git/config",
        ".patchset/ledger-txn/journal.json",
        "link/victim.txt",
        "vllm/" + "a" * 300 + ".py",
        "C:\\windows\\system32",
        "vllm/config/cache.py",
        "/usr/local/lib/python3.12/dist-packages/vllm/config/cache.py",
        "",
    ]
)
VALUE = st.one_of(HOSTILE, st.text(max_size=40), st.integers(), st.none(), st.lists(st.text(max_size=5), max_size=3))
ENTRY = st.dictionaries(
    st.sampled_from(["overlay_file", "site_packages_target", "md5", "sha256", "sets", "provenance"]), VALUE, max_size=6
)
MANIFEST = st.one_of(
    st.fixed_dictionaries(
        {"files": st.lists(ENTRY, max_size=6)},
        optional={"site_packages_root": VALUE, "base_image": VALUE},
    ),
    st.lists(ENTRY, max_size=2),
    st.text(max_size=30),
)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("fuzz-overlay")
    base = tmp / "base"
    (base / "vllm/config").mkdir(parents=True)
    (base / "vllm/config/cache.py").write_text("a = 1\n")
    kit = tmp / "kit"
    (kit / "vllm/config").mkdir(parents=True)
    (kit / "vllm/config/cache.py").write_text("a = 2\n")
    sentinel = Sentinel(tmp)
    os.symlink(sentinel.root, kit / "link")
    led = tmp / "led"
    led.mkdir()
    init_ledger(led / "patches.toml")
    with (led / "patches.toml").open("a") as fh:
        fh.write('[targets.vllm]\npackage = "vllm"\n')
    return {"base": base, "kit": kit, "led": led, "sentinel": sentinel.root, "tmp": tmp}


@settings(max_examples=examples(100), **FUZZ)
@given(manifest=MANIFEST)
def test_a_hostile_manifest_never_writes_outside_the_ledger(world, manifest) -> None:
    m = world["kit"] / "MANIFEST.json"
    m.write_text(json.dumps(manifest) if not isinstance(manifest, str) else manifest)
    before = snapshot(world["sentinel"])
    kit_before = snapshot(world["kit"])
    with deadline(CASE_DEADLINE_S):
        try:
            import_overlay(world["led"] / "patches.toml", world["kit"], "vllm", base_tree=world["base"], manifest=m)
        except PatchsetError:
            pass
    assert snapshot(world["sentinel"]) == before
    assert snapshot(world["kit"]) == kit_before
    outside = {p.name for p in world["tmp"].iterdir()} - {"base", "kit", "led", "sentinel"}
    assert not outside, outside


@settings(max_examples=examples(), **FUZZ)
@given(text=st.text(max_size=300))
def test_a_pr_list_of_any_text_is_read_or_refused(tmp_path_factory, text: str) -> None:
    with deadline(CASE_DEADLINE_S):
        try:
            refs = pr_refs([text], "vllm-project/vllm")
        except PatchsetError:
            return
    assert all(r.number > 0 for r in refs)


NAME = st.one_of(
    st.sampled_from(["a/vllm/x.py", "vllm/x.py", "/usr/lib/vllm/x.py", "b/v1/x.py", "a/", "a b/c d"]),
    st.text(
        alphabet=st.characters(blacklist_characters="\n\r\t\x00", blacklist_categories=("Cs",)), min_size=1, max_size=60
    ),
)


@settings(max_examples=examples(), **FUZZ)
@given(old=NAME, new=NAME, strip=st.integers(0, 4), root=st.sampled_from(["vllm/", "x/y/"]))
def test_diff_names_of_any_shape_are_read_or_refused(old: str, new: str, strip: int, root: str) -> None:
    body = f"--- {old}\n+++ {new}\n@@ -1 +1 @@\n-a\n+b\n".encode("utf-8", "surrogateescape")
    t = Target("vllm", package="vllm")
    with deadline(CASE_DEADLINE_S):
        try:
            infer(body, t, 1, {"vllm/x.py", "vllm/v1/x.py"})
            infer(body, t, 1, None)
            out = reroot(body, strip, root)
        except PatchsetError:
            return
    assert out.endswith(b"@@ -1 +1 @@\n-a\n+b\n")  # the hunk is never touched
