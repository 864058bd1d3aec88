"""Hostile text from GitHub and from upstream history reaches every output as text (issue #23):
never as terminal control (window title, hyperlinks, colours, bidi overrides), never as Markdown
or HTML structure (cells, rows, raw HTML, ``javascript:`` links), never as XML that does not
parse. And one malformed value in a GitHub answer, or in the recorded state read back, marks its
own row; the rest of the dashboard renders.

GitHub is the local GitHub-shaped server (tests.support.fakehub) answering with the hostile
values; the CLI runs in-process, and once on a real pseudo-terminal with colours on.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import re
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from patchset.ci.gate import GateRun, run_gate
from patchset.ci.report import render
from patchset.commands.table import Term
from patchset.ledger.store import load_ledger
from patchset.tracker.github import GitHubClient
from patchset.tracker.status import status
from tests.support.fakehub.server import FakeHub
from tests.support.gateworld import CORE, UTIL, gate_ledger
from tests.support.outputs import (
    MARKDOWN_TAGS,
    check_html,
    check_markdown,
    raw_unsafe,
    terminal_unsafe,
)
from tests.support.ptyrun import run_in_pty
from tests.support.repo import REPO_ROOT, commit_files, git
from tests.support.text import edit

TOKEN = "ghp_injectionWorldToken000000000000000000"
REPO = "acme/demo"

# Everything a terminal, a Markdown renderer or an HTML page could be made to act on.
HOSTILE = (
    "mal\x1b]0;owned\x07"  # OSC 0: the window title
    "\x1b]8;;https://evil.example/\x1b\\here\x1b]8;;\x1b\\"  # OSC 8: a hyperlink
    "\x1b[31;5mred\x1b[0m\x9b2J"  # a colour, and a C1 CSI that clears the screen
    "\u202eevil\u202c\u2066iso\u2069"  # a bidi override and an isolate
    " | cell \r| forged | row |\n## heading"  # Markdown cells, rows, blocks
    " <img src=x onerror=alert(1)> <script>alert(2)</script>"
    " [click](javascript:alert(3)) ![i](javascript:alert(4)) `code` &#x202E; *b* \\"
)
JS_URL = "javascript:alert(document.cookie)"

# number -> (patch id, what the hub holds for it)
PULLS: dict[int, tuple[str, dict]] = {
    1: ("p-hostile-text", {"title": HOSTILE, "author": HOSTILE}),
    4: ("p-good-merge", {"title": "a good one", "author": "alice"}),
    5: ("p-plain", {"title": "plain", "author": "bob"}),
}


def _ledger(numbers: list[int], ids: dict[int, str]) -> str:
    out = [
        'schema = 1\ntitle = "injection demo"\n\n[targets.demo]\nupstream = "https://example.invalid/acme/demo.git"\n'
        'github = "acme/demo"\nbranch = "main"\n'
    ]
    for n in numbers:
        out.append(
            f'\n[[patch]]\nid = "{ids[n]}"\ntarget = "demo"\ntitle = "PR {n}"\norigin = "port"\n'
            f'authors = ["carol"]\n[patch.upstream]\nprs = ["{REPO}#{n}"]\n'
        )
    return "".join(out)


def _world(tmp: Path, pulls: dict[int, tuple[str, dict]]) -> tuple[dict, Path]:
    data = {"tokens": [TOKEN], "repos": {REPO: {"pulls": {str(n): dict(v) for n, (_, v) in pulls.items()}}}}
    led = tmp / "ledger" / "patches.toml"
    led.parent.mkdir()
    led.write_text(_ledger(sorted(pulls), {n: pid for n, (pid, _) in pulls.items()}))
    return data, led


@pytest.fixture()
def hostile(tmp_path, monkeypatch):
    """The hub serves hostile text; the CLI's environment points at it."""
    data, led = _world(tmp_path, PULLS)
    with FakeHub(data) as hub:
        hub.merge(REPO, 4, merge_commit_sha="a" * 40, merged_at="2026-10-01T10:00:00Z")
        env = {
            "PATCHSET_GITHUB_API": hub.base_url,
            "PATCHSET_CACHE": str(tmp_path / "cache"),
            "GITHUB_TOKEN": TOKEN,
        }
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("PATCHSET_TTY", raising=False)
        yield {"hub": hub, "ledger": led, "env": env, "tmp": tmp_path}


def _cli_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "PATCHSET_TTY", "COLUMNS")}
    env.update(extra)
    env.update({"PYTHONPATH": str(REPO_ROOT), "COLUMNS": "250", "TERM": "xterm-256color"})
    return env


# ---- the dashboard ---------------------------------------------------------------------------------
def test_a_terminal_shows_hostile_github_text_and_never_interprets_it(hostile):
    """``status --refresh`` then ``status`` on a real pseudo-terminal with colours: no escape
    sequence or bidi character from GitHub reaches the terminal; each is shown as text."""
    led = hostile["ledger"]
    argv = [sys.executable, "-c", "from patchset.cli import main; main()", "-C", str(led.parent), "status"]
    for extra in (["--refresh"], []):
        code, out, err = run_in_pty([*argv, *extra], env=_cli_env(hostile["env"]))
        text = out.decode("utf-8")
        assert code == 0, (code, text, err)
        assert "\x1b[" in text  # colours are on: this is the terminal layout
        assert not terminal_unsafe(text), f"raw to the terminal: {terminal_unsafe(text)[:8]}\n{text!r}"
        assert "mal\\x1b]0;owned\\x07" in text and "<U+202E>evil" in text  # shown, as text
        for pid, _ in PULLS.values():
            assert pid in text
        assert b"Traceback" not in err


def test_markdown_keeps_every_row_and_cell_and_carries_no_markup_from_github(hostile, run):
    r = run("status", "--refresh", "--markdown", cwd=hostile["ledger"].parent)
    assert r.code == 0, r
    md = r.stdout
    p = check_markdown(md, rows=[len(PULLS)], cells=11, allowed_tags=MARKDOWN_TAGS)
    text = "".join(p.text)
    assert "mal\\x1b]0;owned\\x07" in text and "<img src=x onerror=alert(1)>" in text  # shown as text
    assert "javascript:" not in " ".join(p.links())
    # the hostile row is one row: its cells hold the whole value (nothing spilled into a new row)
    assert sum(1 for ln in md.splitlines() if ln.startswith("| ")) == len(PULLS) + 1


def test_html_page_escapes_github_text_and_links_only_http(hostile, run, tmp_path):
    page_file = tmp_path / "status.html"
    r = run("status", "--refresh", "--html", page_file, cwd=hostile["ledger"].parent)
    assert r.code == 0, r
    doc = page_file.read_text()
    p = check_html(doc, rows=len(PULLS))
    assert "<script>alert(2)</script>" in "".join(p.text)  # shown, not run
    assert JS_URL not in p.links()


def test_json_keeps_github_text_exact_and_escaped(hostile, run):
    r = run("status", "--refresh", "--json", cwd=hostile["ledger"].parent)
    assert r.code == 0, r
    assert not raw_unsafe(r.stdout), raw_unsafe(r.stdout)[:5]
    rows = {x["id"]: x for x in json.loads(r.stdout)["rows"]}
    assert rows["p-hostile-text"]["pr"]["author"] == HOSTILE  # the machine format keeps the data exact


# ---- one bad value, one marked row -------------------------------------------------------------------
BAD: dict[int, tuple[str, dict, str]] = {
    # number -> (patch id, hub values, the field the row names)
    2: ("p-bad-merged-at", {"merged_at": "2026-13-45T99:00:00Z\x1b[2J"}, "mergedAt"),
    3: ("p-bad-merge-commit", {"merge_commit_sha": "HEAD~1; $(touch pwned)\x07"}, "mergeCommit"),
    6: ("p-bad-head", {"head_sha": "--output=/tmp/x"}, "headRefOid"),
    7: ("p-bad-state", {"state": "reopened"}, "state"),
    8: ("p-bad-review", {"review_decision": "LGTM\x1b]0;x\x07"}, "reviewDecision"),
    9: ("p-bad-url", {"html_url": JS_URL}, "url"),
}


@pytest.fixture()
def malformed(tmp_path, monkeypatch):
    pulls: dict[int, tuple[str, dict]] = {4: ("p-good-merge", {"title": "a good one", "author": "alice"})}
    for n, (pid, _, _) in BAD.items():
        pulls[n] = (pid, {"title": f"PR {n}"})
    data, led = _world(tmp_path, pulls)
    with FakeHub(data) as hub:
        hub.merge(REPO, 4, merge_commit_sha="a" * 40, merged_at="2026-10-01T10:00:00Z")
        for n, (_, values, _) in BAD.items():
            pull = hub.state.pull(REPO, n)
            if "merged_at" in values or "merge_commit_sha" in values:
                hub.merge(REPO, n, merge_commit_sha=f"{n:x}" * 40, merged_at="2026-10-02T10:00:00Z")
            for k, v in values.items():
                setattr(pull, k, v)
        monkeypatch.setenv("PATCHSET_GITHUB_API", hub.base_url)
        monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
        monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
        yield {"hub": hub, "ledger": led, "tmp": tmp_path}


def _client(hub: FakeHub, tmp: Path, **kw) -> GitHubClient:
    return GitHubClient(base_url=hub.base_url, token=TOKEN, cache_dir=tmp / "cache", retries=0, **kw)


def test_one_malformed_value_marks_only_its_row(malformed, run):
    hub, led, tmp = malformed["hub"], malformed["ledger"], malformed["tmp"]
    rep = status(led, refresh=True, client=_client(hub, tmp), histories={})
    rows = {r.id: r for r in rep.rows}
    for pid, _, fld in BAD.values():
        assert rows[pid].error and f"unreadable upstream data: {fld}: " in rows[pid].error, (pid, rows[pid].error)
        assert rows[pid].action == "unknown"
        assert not raw_unsafe(rows[pid].error, newlines=False)  # the value is shown sanitised
    good = rows["p-good-merge"]
    assert (good.error, good.upstream_state, good.action) == (None, "merged", "drop-at-rebase")
    assert rep.exit_code == 2 and len(rep.errors()) == len(BAD)
    # what was read is recorded; the unreadable rows are not
    st = {p.id: p.status for p in load_ledger(led).patches}
    assert (st["p-good-merge"].pr_state, st["p-good-merge"].merged_at) == ("merged", dt.date(2026, 10, 1))
    assert all(st[pid].pr_state == "unknown" for pid, _, _ in BAD.values())
    # the CLI says the same, every row shown, exit 2 as documented ("some rows could not be read")
    r = run("status", "--refresh", cwd=led.parent)
    assert r.code == 2, r
    assert "internal error" not in r.stderr and "error:" not in r.stderr
    for pid, _, fld in BAD.values():
        assert pid in r.stdout and f"unreadable upstream data: {fld}" in r.stdout
    # and so do Markdown and HTML, with the values shown as text
    r = run("status", "--refresh", "--markdown", cwd=led.parent)
    assert r.code == 2, r
    p = check_markdown(r.stdout, rows=[len(BAD) + 1], cells=11, allowed_tags=MARKDOWN_TAGS)
    assert JS_URL in "".join(p.text) and JS_URL not in p.links()
    page_file = tmp / "status.html"
    assert run("status", "--refresh", "--html", page_file, cwd=led.parent).code == 2
    assert JS_URL not in check_html(page_file.read_text(), rows=len(BAD) + 1).links()


def _tamper_states(client: GitHubClient, change) -> None:
    """Rewrite the recorded PR states ``status --refresh`` left in the client's cache."""
    name = f"states:{client.base_url}:{REPO}"
    entry = client.cache.get("STATE", name)
    assert entry is not None, "no recorded states to tamper with"
    states = json.loads(entry.body)
    change(states)
    client.cache.put("STATE", name, "", b"", 200, {}, json.dumps(states).encode())


def test_a_tampered_state_cache_marks_only_its_rows(hostile):
    hub, led, tmp = hostile["hub"], hostile["ledger"], hostile["tmp"]
    status(led, refresh=True, client=_client(hub, tmp), histories={})

    def change(states: dict) -> None:
        states["pr:1"].update(state="merged", merged=True, merged_at="yesterday\x1b[2J")
        states["pr:4"]["merge_commit"] = "not a sha"
        states["pr:5"]["fetched_at"] = "soon"  # a string where a time was: no age can be computed

    _tamper_states(_client(hub, tmp), change)
    rep = status(led, client=_client(hub, tmp, offline=True), histories={})
    rows = {r.id: r for r in rep.rows}
    assert "unreadable recorded state: merged_at: " in (rows["p-hostile-text"].error or "")
    assert "unreadable recorded state: merge_commit: " in (rows["p-good-merge"].error or "")
    assert "unreadable recorded state: fetched_at: " in (rows["p-plain"].error or "")
    assert rep.exit_code == 2 and len(rep.errors()) == 3

    # an entry recorded under another ref's key is not that ref's state
    status(led, refresh=True, client=_client(hub, tmp), histories={})
    _tamper_states(_client(hub, tmp), lambda s: s.update({"pr:4": s["pr:5"]}))
    rep = status(led, client=_client(hub, tmp, offline=True), histories={})
    rows = {r.id: r for r in rep.rows}
    assert "unreadable recorded state: ref: " in (rows["p-good-merge"].error or "")
    assert rows["p-plain"].error is None and rows["p-plain"].upstream_state == "open"


# ---- the gate's report -------------------------------------------------------------------------------
SUBJECT = (
    "Rework\x1b]0;owned\x07 limit_5 \x1b[31mred\x1b[0m \u202eevil\u202c | cell | </failure><x a='1'>&amp;"
    " <img src=x onerror=alert(1)> [c](javascript:alert(1)) \x0b\x0c\x1f (#104)"
)


@pytest.fixture()
def hostile_upstream(tmp_path):
    """c0 imports the code; c1, with a hostile subject, rewrites the lines patch B changes."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    c0 = commit_files(repo, "Initial import (#100)", {"pkg/core.py": CORE, "pkg/util.py": UTIL, "README": "demo\n"})
    core = edit(CORE, "def limit_5(x):\n    return x + 5\n", "def limit_5(x, cap=None):\n    return cap\n")
    c1 = commit_files(repo, SUBJECT, {"pkg/core.py": core})
    assert git(repo, "log", "-1", "--format=%s", c1).rstrip("\n") == SUBJECT  # git kept every byte
    return repo, [c0, c1]


def test_gate_report_and_junit_with_a_hostile_commit_subject(hostile_upstream, tmp_path):
    repo, c = hostile_upstream
    ledger = gate_ledger(tmp_path / "proj", repo, c[0])
    art = tmp_path / "art"
    r = run_gate(GateRun(ledger, artifacts=art, onto=c[1]))
    assert (r.status, r.conflicts) == ("red", ["B"]), r.to_json()
    assert r.first_bad["B"]["commit"]["subject"] == SUBJECT  # the data is kept exact ...

    root = ET.fromstring((art / "junit.xml").read_bytes())  # ... and the XML is well-formed
    failure = root.find("testsuite/testcase[@name='B']/failure")
    assert failure is not None and "limit_5" in failure.get("message", "")
    assert not raw_unsafe(failure.get("message", ""))

    md = (art / "report.md").read_text()
    p = check_markdown(md, rows=[2], cells=4, allowed_tags=MARKDOWN_TAGS)
    assert "Rework\\x1b]0;owned\\x07" in "".join(p.text)  # shown, as text

    buf = io.StringIO()
    render(r, Term(buf, tty=True, width=200, color=True))
    assert not terminal_unsafe(buf.getvalue()), terminal_unsafe(buf.getvalue())[:8]
    buf = io.StringIO()
    render(r, Term(buf, tty=False, color=False))
    assert not raw_unsafe(buf.getvalue()), raw_unsafe(buf.getvalue())[:8]
    assert re.search(r"B\tconflict", buf.getvalue())  # the piped table keeps its fields


# ---- other people's ledgers and trees ------------------------------------------------------------------
def test_names_from_someone_elses_tree_and_ledger_are_shown_not_sent(run, tmp_path):
    """A body file named with an escape sequence (``audit`` of a tree someone sent) and a ledger
    whose title and description carry them (``show``, ``list``): the text is printed, the
    controls are shown as escapes, one line stays one line."""
    led = tmp_path / "led"
    shutil.copytree(REPO_ROOT / "examples" / "spark-sm12x", led)
    toml = led / "patches.toml"
    toml.write_text(
        toml.read_text().replace(
            'title = "Offer the SM90 FlashInfer sparse-MLA backend on SM12x for 512-wide heads"',
            'title = "Offer \\u001b]0;owned\\u0007 SM90 \\u202eevil\\r\\nforged line"',
        )
    )
    src = tmp_path / "src"
    src.mkdir()
    (src / "0001-evil\x1b]0;owned\x07\u202e.patch").write_text("diff --git a/x b/x\n")
    r = run("audit", src, cwd=led)
    assert r.code == 1 and "0001-evil\\x1b]0;owned\\x07<U+202E>.patch" in r.stdout, r
    assert not raw_unsafe(r.stdout), raw_unsafe(r.stdout)
    r = run("show", "01-sm12x-sparse-mla-sm90", cwd=led)
    assert r.code == 0 and "Offer \\x1b]0;owned\\x07 SM90 <U+202E>evil forged line" in r.stdout, r
    assert not raw_unsafe(r.stdout), raw_unsafe(r.stdout)


def test_a_file_name_from_github_cannot_write_diff_headers_of_its_own():
    """The per-file fallback writes GitHub's file names into diff headers: a name with a newline
    (or a commit "sha" that is a path) is unreadable upstream data, not part of the body."""
    from patchset.tracker.github.failures import Failure
    from patchset.tracker.github.prdiff import diff_from_files

    evil = {
        "filename": "a.py\n+++ b/../../etc/passwd",
        "status": "modified",
        "patch": "@@ -1 +1 @@\n-a\n+b",
        "changes": 2,
    }
    with pytest.raises(Failure) as got:
        diff_from_files([{"filename": "ok.py", "status": "modified", "patch": "@@ -1 +1 @@\n-a\n+b"}, evil])
    assert got.value.row.message.startswith("unreadable upstream data: filename: ")
    assert "\n" not in got.value.row.message
    smuggled = "@@ -1 +1 @@\n-a\n+b\n--- a/z\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-x\n+y"  # a second file
    for bad in (
        {"changes": "many"},
        {"patch": ["x"]},
        {"patch": smuggled},
        {"status": "exploded"},
        {"previous_filename": "x\x1b"},
    ):
        with pytest.raises(Failure, match="unreadable upstream data"):
            diff_from_files([{"filename": "ok.py", "status": "modified", "patch": "@@ -1 +1 @@\n-a\n+b", **bad}])
