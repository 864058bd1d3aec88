"""Fuzz: hostile GitHub answers and tampered recorded states through the parser and every renderer.

Hypothesis draws GraphQL and REST pull request bodies and recorded state entries whose fields are
sometimes right and sometimes anything (text with controls, bidi overrides, Markdown and HTML;
dates, shas, numbers, enums and flags of the wrong form or type). For every case:

* parsing ends in a checked ``PRState`` (every field of its documented form) or a marked row
  (``RowError``, its message free of raw control characters), never an exception;
* the dashboard built from it (the real offline client reading the real state cache, the real
  ledger) renders on a terminal, piped, as Markdown, HTML and JSON with the invariants of
  tests.support.outputs: nothing a terminal would interpret, no Markdown cell or row added or
  lost, no markup or non-http(s) link from data, one script in the page;
* the gate's report.md, junit.xml and terminal view of hostile commit subjects, paths, messages
  and test output hold the same invariants, and junit.xml parses.
"""

from __future__ import annotations

import io
import json
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patchset.ci.artifacts import junit, markdown
from patchset.ci.report import GateReport, render
from patchset.commands.table import Term
from patchset.text import html_text, markdown_code, markdown_link, markdown_text, safe_url, terminal, xml_text
from patchset.tracker.github import GitHubClient
from patchset.tracker.github.graphql import parse_states
from patchset.tracker.github.httpcache import HttpCache
from patchset.tracker.github.payloads import Unreadable, pull_from_rest
from patchset.tracker.html import to_html
from patchset.tracker.status import status
from patchset.tracker.views import render_status, to_markdown
from patchset.upstream.refs import MALFORMED, PRRef, PRState, RowError
from tests.support.fuzz import CASE_DEADLINE_S, examples
from tests.support.github_payloads import graphql_pull, junk, often, recorded_entry, rest_pull, sha, text
from tests.support.outputs import (
    MARKDOWN_TAGS,
    check_html,
    check_markdown,
    markdown_html,
    page,
    raw_unsafe,
    terminal_unsafe,
    xml_unsafe,
)

pytestmark = pytest.mark.fuzz

REPO = "acme/demo"
BASE = "http://127.0.0.1:9/api/v3"  # never contacted: the client is offline
DATE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
HEX40 = re.compile(r"[0-9a-f]{40}")
# Big nested answers: generation may be slow or overrun on a loaded machine; that is not a finding.
SETTINGS = settings(
    max_examples=examples(),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

# A ledger of other people's data: a hostile title and reason, recorded states to fall back on.
LEDGER = r"""schema = 1
title = "fuzz \u001b]0;owned\u0007 | <b>x</b> [l](javascript:alert(1))"

[targets.demo]
upstream = "https://example.invalid/acme/demo.git"
github = "acme/demo"
branch = "main"

[[patch]]
id = "p1"
target = "demo"
title = "one \u202e | `x` <img src=x>"
origin = "port"
[patch.upstream]
prs = ["acme/demo#1"]
[patch.status]
pr_state = "open"
recorded = 2026-09-26

[[patch]]
id = "p2"
target = "demo"
title = "two"
origin = "port"
[patch.upstream]
prs = ["acme/demo#2"]

[[patch]]
id = "p3"
target = "demo"
title = "three"
origin = "ours"
state = "held"
reason = "held \u001b[2J | reason\r\n## not a heading"
"""
ROWS = 3


def assert_checked(got: PRState | RowError) -> None:
    """A parsed state has every field in the form the parsers promise; a row error is clean."""
    if isinstance(got, RowError):
        assert got.kind == MALFORMED, got
        assert not raw_unsafe(got.message, newlines=False), got.message
        return
    assert isinstance(got, PRState)
    assert got.state in ("open", "closed", "merged") and got.merged == (got.state == "merged")
    assert isinstance(got.title, str) and (got.author is None or isinstance(got.author, str))
    assert all(isinstance(getattr(got, f), bool) for f in ("draft", "merged", "is_pull"))
    for f in ("merged_at", "updated_at", "closed_at"):
        assert getattr(got, f) is None or DATE.fullmatch(getattr(got, f)), (f, getattr(got, f))
    for f in ("merge_commit", "head_sha"):
        assert getattr(got, f) is None or HEX40.fullmatch(getattr(got, f)), (f, getattr(got, f))
    assert got.url is None or safe_url(got.url) == got.url
    assert got.review_decision in (None, "APPROVED", "CHANGES_REQUESTED", "REVIEW_REQUIRED")
    assert got.ci in (None, "EXPECTED", "ERROR", "FAILURE", "PENDING", "SUCCESS")


# ---- the sanitisers ------------------------------------------------------------------------------
def _one_line(s: str) -> str:
    return re.sub(r"\r\n|[\r\n]", " ", s)


@SETTINGS
@given(s=text, url=st.one_of(text, st.sampled_from(["https://x.example/a(b)|c", "javascript:alert(1)"])))
def test_each_sanitiser_shows_the_text_and_nothing_else(s, url):
    """What each sanitiser returns carries nothing its output kind would act on, and reads back
    (rendered by a real Markdown, HTML or XML parser) as exactly the text, its controls shown."""
    shown = terminal(s)
    assert not raw_unsafe(shown, newlines=False) and terminal(shown) == shown
    assert not raw_unsafe(terminal(s, block=True))
    want = terminal(_one_line(s))
    # Markdown: one table, one row, one cell, whose text is the input
    for cell, expect in ((markdown_text(s), want.strip()), (markdown_code(s, cell=True), want)):
        p = page(markdown_html(f"| h |\n|---|\n| {cell} |\n"))
        assert [len(t) for t in p.tables] == [1] and p.tables[0] == [1], (s, cell)
        got = "".join(p.text).split("h", 1)[1]  # the page's text: the header "h", then the cell
        assert got.strip() == expect.strip(), (s, cell, got)
    link = page(markdown_html(markdown_link(s, url)))
    assert link.links() == ([] if safe_url(url) is None else [link.links()[0]])
    assert all(u.startswith(("http://", "https://")) for u in link.links())
    # HTML and XML: the text comes back
    assert "".join(page(html_text(s)).text) == terminal(s, block=True)
    assert not xml_unsafe(xml_text(s))
    back = ET.fromstring(ET.tostring(_element(xml_text(s)))).text or ""
    assert back == re.sub(r"\r\n?", "\n", xml_text(s))


def _element(body: str) -> ET.Element:
    el = ET.Element("t")
    el.text = body
    return el


# ---- the parsers ---------------------------------------------------------------------------------
@SETTINGS
@given(node=graphql_pull(1), typename=st.sampled_from([None, "PullRequest", "Issue", "Commit", 7]))
def test_graphql_answers_parse_to_checked_states_or_marked_rows(node, typename):
    if typename is not None:
        node = dict(node, __typename=typename)
    ref = PRRef(REPO, 1)
    t0 = time.monotonic()
    got = parse_states(REPO, [ref], {"data": {"repository": {ref.alias: node}}})
    assert time.monotonic() - t0 < CASE_DEADLINE_S
    assert list(got) == [ref]
    assert_checked(got[ref])


@SETTINGS
@given(body=rest_pull(1))
def test_rest_answers_parse_to_checked_states_or_marked_rows(body):
    ref = PRRef(REPO, 1)
    try:
        got: PRState | RowError = pull_from_rest(ref, body)
    except Unreadable as bad:
        got = bad.row()
    assert_checked(got)


@SETTINGS
@given(
    errors=st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {
                    "path": st.one_of(st.just(["repository", "pr1"]), text, st.integers()),
                    "message": text,
                    "type": st.one_of(st.none(), text),
                }
            ),
            text,
            st.integers(),
        ),
        max_size=3,
    ),
    data=st.one_of(st.none(), text, st.fixed_dictionaries({"repository": st.one_of(st.none(), text, st.just({}))})),
)
def test_graphql_error_documents_mark_rows(errors, data):
    ref = PRRef(REPO, 1)
    got = parse_states(REPO, [ref], {"errors": errors, "data": data})
    assert isinstance(got[ref], RowError)  # (its text, GitHub's own message, is sanitised where it is shown)


_FILE_STATUS = st.sampled_from(["added", "removed", "modified", "renamed", "changed"])
_HUNKS = st.sampled_from(["@@ -1 +1 @@\n-a\n+b", "@@ -0,0 +1,2 @@\n+a\n+b", "@@ -1,2 +1,1 @@\n a\n-b\n"])


@SETTINGS
@given(
    files=st.lists(
        st.fixed_dictionaries(
            {
                "filename": often(st.sampled_from(["a.py", "pkg/b.py"]), text),
                "previous_filename": often(st.none(), text),
                "status": often(_FILE_STATUS, text),
                "patch": often(
                    st.one_of(st.none(), _HUNKS), st.one_of(text, _HUNKS.map(lambda h: h + "\n" + "--- a/x"))
                ),
                "changes": often(st.integers(0, 9), junk),
            }
        ),
        max_size=4,
    )
)
def test_file_lists_rebuild_a_diff_or_mark_the_row(files):
    """The per-file fallback writes one ``diff --git`` section per listed file with a patch, and
    nothing else; an entry out of shape marks the row."""
    from patchset.tracker.github.failures import Failure
    from patchset.tracker.github.prdiff import diff_from_files

    try:
        data, missing = diff_from_files(files)
    except Failure as f:
        assert f.row.kind == MALFORMED and not raw_unsafe(f.row.message, newlines=False)
        return
    lines = data.decode("utf-8").split("\n")
    assert sum(1 for ln in lines if ln.startswith("diff --git ")) == len(files) - len(missing)
    assert sum(1 for ln in lines if ln.startswith("+++ ")) <= len(files) - len(missing)


# ---- the dashboard -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("fuzz-github")
    (root / "ledger").mkdir()
    led = root / "ledger" / "patches.toml"
    led.write_text(LEDGER)
    return {"ledger": led, "cache": root / "cache", "root": root}


def _record(cache: Path, entries: dict) -> None:
    """What ``status --refresh`` leaves in the client's cache for the repository, replaced."""
    body = json.dumps(entries).encode("utf-8")
    HttpCache(cache).put("STATE", f"states:{BASE}:{REPO}", "", b"", 200, {}, body)


def check_every_output(rep) -> None:
    buf = io.StringIO()
    render_status(Term(buf, tty=True, width=160, color=True), rep)
    assert not terminal_unsafe(buf.getvalue()), terminal_unsafe(buf.getvalue())[:5]
    buf = io.StringIO()
    render_status(Term(buf, tty=False, color=False), rep)
    table = [ln for ln in buf.getvalue().splitlines() if "\t" in ln]
    assert not raw_unsafe(buf.getvalue()), raw_unsafe(buf.getvalue())[:5]
    assert len(table) == ROWS + 1 and all(len(ln.split("\t")) == 11 for ln in table), table
    check_markdown(to_markdown(rep), rows=[ROWS], cells=11, allowed_tags=MARKDOWN_TAGS)
    check_html(to_html(rep), rows=ROWS)
    doc = json.dumps(rep.to_json())
    assert not raw_unsafe(doc) and len(json.loads(doc)["rows"]) == ROWS


@SETTINGS
@given(one=recorded_entry(1), two=st.one_of(recorded_entry(2), st.none(), text, st.integers()))
def test_recorded_states_render_safely_everywhere(world, one, two):
    entries = {"pr:1": one} if two is None else {"pr:1": one, "pr:2": two}
    _record(world["cache"], entries)
    t0 = time.monotonic()
    client = GitHubClient(base_url=BASE, cache_dir=world["cache"], offline=True)
    rep = status(world["ledger"], client=client, histories={})
    assert client.round_trips == 0
    rows = {r.id: r for r in rep.rows}
    assert len(rows) == ROWS
    for pid in ("p1", "p2"):
        pr = rows[pid].pr
        assert pr is not None
        if pr.error:
            assert not raw_unsafe(rows[pid].error or "", newlines=False)
    check_every_output(rep)
    assert time.monotonic() - t0 < CASE_DEADLINE_S


@SETTINGS
@given(node=graphql_pull(1))
def test_parsed_answers_render_safely_everywhere(world, node):
    """An answer the parser accepts, recorded as ``status --refresh`` records it, then shown."""
    ref = PRRef(REPO, 1)
    got = parse_states(REPO, [ref], {"data": {"repository": {ref.alias: node}}})[ref]
    _record(world["cache"], {"pr:1": got.to_json()} if isinstance(got, PRState) else {})
    rep = status(
        world["ledger"], client=GitHubClient(base_url=BASE, cache_dir=world["cache"], offline=True), histories={}
    )
    if isinstance(got, PRState):
        pr = {r.id: r for r in rep.rows}["p1"].pr
        assert pr is not None and pr.source == "cache" and pr.title == got.title  # accepted data is kept exact
    check_every_output(rep)


# ---- the gate's report ------------------------------------------------------------------------------
@SETTINGS
@given(subject=text, path=text, message=text, tail=text, name=text, onto=text, commit=sha)
def test_gate_report_renders_hostile_text_safely(subject, path, message, tail, name, onto, commit):
    bad = {"sha": commit, "subject": subject, "pr": 104, "release": ""}
    r = GateReport(
        status="red",
        target="demo",
        upstream={"kind": "git", "location": path},
        asked=onto,
        onto=onto,
        commit=commit,
        base=onto,
        rebase={
            "patches": [
                {"id": "A", "verdict": "carried", "how": message, "files": []},
                {
                    "id": "B",
                    "verdict": "conflict",
                    "files": [
                        {
                            "path": path,
                            "how": "conflict",
                            "message": message,
                            "hunks": [{"index": 1, "line": 5, "commits": [bad]}],
                        }
                    ],
                },
            ]
        },
        first_bad={"B": {"commit": bad, "last_good": commit, "range_size": 3, "probes": 2}},
        apply={"outcome": "failed", "message": message, "mismatched": [path]},
        tests=[
            {
                "patch": "A",
                "name": name,
                "kind": "command",
                "status": "failed",
                "class": message,
                "seconds": 0.1,
                "command": message,
                "tail": tail,
            }
        ],
        tags=["cpu"],
        upstream_status={
            "mode": "default",
            "data_age": message,
            "actions": [{"id": "A", "action": name, "text": message}],
        },
        series_patch={"path": path, "files": [path]},
        warnings=[message],
        errors=[message],
    )
    check_markdown(markdown(r), rows=[2, 1], cells=[4, 6], allowed_tags=MARKDOWN_TAGS)
    root = ET.fromstring(junit(r))  # well-formed, whatever the text
    for el in root.iter():
        for value in [el.text or "", el.tail or "", *el.attrib.values()]:
            assert not xml_unsafe(value), (el.tag, value)
    buf = io.StringIO()
    render(r, Term(buf, tty=True, width=120, color=True))
    assert not terminal_unsafe(buf.getvalue()), terminal_unsafe(buf.getvalue())[:5]
