"""Fuzz tier for what a build tree, an image and GitHub's timeline say about upstream commits
(issue #27): hostile ``_version.py``, ``METADATA``, ``direct_url.json`` and dist-info names in a
tree (links out of it, FIFOs, huge files, control characters), ``docker image inspect`` output,
and cross-reference items of a PR's timeline.

Every case must end within ``CASE_DEADLINE_S``, write nothing (a Sentinel sits where a link out
of the tree points), raise nothing but patchset's domain exceptions, and keep nothing that could
reach a terminal as a control character: every version and commit kept matches its pattern.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchset.errors import PatchsetError
from patchset.tracker import followups as fu
from patchset.upstream import nightly
from tests.support.fuzz import CASE_DEADLINE_S, Sentinel, examples

pytestmark = pytest.mark.timeout(600)

FUZZ = settings(
    max_examples=examples(),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
VERSION = re.compile(r"[0-9][0-9A-Za-z.!+_-]{0,127}")
HEX = re.compile(r"[0-9a-f]{7,40}")
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

hostile_text = st.one_of(
    st.text(max_size=300),
    st.sampled_from(
        [
            "0.30.1rc1.dev48+g7f1a539",
            "0.30.1rc1.dev48+g7f1a539\x1b[2J",
            "1.0+g" + "a" * 41,
            "0.1+gdeadbeef.d20260101.cu130",
            "\u202e0.1+gabcdef0",
            "'; import os; os.system('touch pwned') #",
        ]
    ),
)


def version_py(v: str) -> bytes:
    return f"__version__ = version = {v!r}\n__commit_id__ = commit_id = {v[-9:]!r}\n".encode("utf-8", "surrogatepass")


@st.composite
def trees(draw):
    """(how to lay out one file, its bytes) for each place a tree may name its version."""
    kinds = st.sampled_from(["file", "link-out", "fifo", "dir", "huge", "absent"])
    vtext = draw(hostile_text)
    return {
        "vllm/_version.py": (draw(kinds), draw(st.one_of(st.binary(max_size=400), st.just(version_py(vtext))))),
        "METADATA": (draw(kinds), f"Name: vllm\nVersion: {vtext}\n\n".encode("utf-8", "surrogatepass")),
        "direct_url.json": (
            draw(kinds),
            draw(
                st.one_of(
                    st.binary(max_size=200),
                    st.builds(
                        lambda u, c: json.dumps({"url": u, "vcs_info": {"commit_id": c}}).encode(),
                        st.text(max_size=200),
                        st.text(max_size=50),
                    ),
                )
            ),
        ),
        "info": draw(
            st.sampled_from(["vllm-1.0.dist-info", "VLLM-0.30.1rc1.dev48+g7f1a539.dist-info", "vllm\x1b.dist-info"])
        ),
    }


def _lay(tree: Path, rel: str, kind: str, data: bytes, outside: Path) -> None:
    p = tree / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if kind == "file":
        p.write_bytes(data)
    elif kind == "link-out":
        p.symlink_to(outside / "victim.txt")
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "dir":
        p.mkdir()
    elif kind == "huge":
        with open(p, "wb") as f:
            f.truncate(nightly.MAX_READ + 1)


@FUZZ
@given(case=trees())
def test_tree_clues_are_bounded_and_clean(tmp_path_factory, case) -> None:
    base = tmp_path_factory.mktemp("tree")
    sentinel = Sentinel(base)
    tree = base / "tree"
    tree.mkdir()
    try:
        _lay(tree, "vllm/_version.py", *case["vllm/_version.py"], sentinel.root)
        for name in ("METADATA", "direct_url.json"):
            _lay(tree, f"{case['info']}/{name}", *case[name], sentinel.root)
    except OSError:
        pass  # a name the file system refuses: nothing to read
    t0 = time.monotonic()
    try:
        clues = nightly.tree_clues(tree, "vllm", "vllm")
        detected = nightly.combine(clues)
        nightly.resolve_prefix(detected.commit or "0000000", base="7f1a5398e9610d96c473931a26c0e12bbe0d0423")
    except PatchsetError:
        clues = []
    assert time.monotonic() - t0 < CASE_DEADLINE_S
    for c in clues:
        assert not c.version or VERSION.fullmatch(c.version), c
        assert not c.commit or HEX.fullmatch(c.commit), c
        assert not CONTROL.search(c.note), c.note
        assert not CONTROL.search(c.source), c.source
    sentinel.assert_untouched()
    shutil.rmtree(base, ignore_errors=True)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=60)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=20), inner, max_size=4)),
    max_leaves=20,
)


@FUZZ
@given(
    doc=st.one_of(
        json_values,
        st.builds(
            lambda labels, env: [{"Config": {"Labels": labels, "Env": env}}],
            st.one_of(json_values, st.dictionaries(st.just(nightly.LABEL), json_values, max_size=1)),
            st.one_of(json_values, st.lists(st.text(max_size=80), max_size=4)),
        ),
    )
)
def test_docker_inspect_output_is_parsed_or_refused(doc) -> None:
    try:
        clues = nightly.parse_inspect(json.dumps(doc).encode())
    except PatchsetError:
        return
    for c in clues:
        assert not c.commit or HEX.fullmatch(c.commit), c


@FUZZ
@given(
    items=st.lists(
        st.one_of(
            json_values,
            st.builds(
                lambda typename, n, title, state, url, repo, date: {
                    "source": {
                        "__typename": typename,
                        "number": n,
                        "title": title,
                        "state": state,
                        "issueState": state,
                        "url": url,
                        "createdAt": date,
                        "mergedAt": date,
                        "repository": {"nameWithOwner": repo},
                        "author": {"login": title[:10]},
                        "mergeCommit": {"oid": date},
                    }
                },
                st.sampled_from(["PullRequest", "Issue", "Commit", None]),
                st.one_of(st.integers(), st.booleans(), st.text(max_size=5)),
                hostile_text,
                st.sampled_from(["OPEN", "MERGED", "CLOSED", "open", None, 3]),
                st.one_of(
                    st.text(max_size=80), st.just("javascript:alert(1)"), st.just("https://github.com/a/b/pull/1")
                ),
                st.one_of(st.text(max_size=30), st.just("acme/demo"), st.just("../../etc")),
                st.one_of(st.text(max_size=30), st.just("2026-09-28T10:00:00Z")),
            ),
        ),
        max_size=6,
    )
)
def test_timeline_items_are_checked_one_by_one(items) -> None:
    node = {"timelineItems": {"totalCount": len(items), "nodes": items}}
    found, notes = fu.parse_timeline("acme/demo", 201, node)
    assert len(found) + len(notes) <= len(items) + 1
    for f in found:
        back = fu.FollowUp.from_json(f.to_json())  # what the cache holds reads back, checked
        assert back.klass in fu.CLASSES and (f.url is None or f.url.startswith(("http://", "https://")))
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}#\d+", f.ref)
    for n in notes:
        assert not CONTROL.search(n), n
