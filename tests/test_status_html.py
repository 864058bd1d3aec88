"""The static status page, opened in real headless Chromium: it shows every row, sorts by a
column through its own click handler (driven by the URL hash), escapes what it shows, and loads
nothing from outside."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from patchset.tracker.html import to_html, write_html
from patchset.tracker.status import RefRow, StatusRow, make_client, status
from tests.support.repo import REPO_ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class Rows(HTMLParser):
    """Row ids (``tr[data-id]``) in document order, and the body's ``data-sorted``."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.sorted: str | None = None
        self.aria: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("data-id"):
            self.ids.append(a["data-id"] or "")
        elif tag == "body":
            self.sorted = a.get("data-sorted")
        elif tag == "th" and a.get("aria-sort"):
            self.aria[a.get("data-key") or ""] = a["aria-sort"] or ""


def dump_dom(page: Path, fragment: str, tmp: Path) -> Rows:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the page test needs a real browser")
    cmd = [
        CHROMIUM,
        *FLAGS,
        f"--user-data-dir={tmp / 'chromium-profile'}",
        "--dump-dom",
        page.resolve().as_uri() + fragment,
    ]
    proc = subprocess.run(cmd, capture_output=True, timeout=90)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    parser = Rows()
    parser.feed(proc.stdout.decode("utf-8"))
    return parser


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("page")
    d = tmp / "real"
    d.mkdir()
    shutil.copy(REPO_ROOT / "patches.toml", d / "patches.toml")
    rep = status(
        d / "patches.toml",
        client=make_client(offline=True, base_url="http://127.0.0.1:9/api/v3", cache_dir=tmp / "cache"),
        histories={},
    )
    # a hostile title and an error row: both must show as text
    evil = StatusRow(
        order=99,
        id="zz-evil",
        target="vllm",
        title="<img src=x onerror=alert(1)>",
        origin="ours",
        state="active",
        pr=RefRow(
            ref="vllm-project/vllm#1",
            role="prs",
            title="<script>boom()</script>",
            error={"error": "rate_limit", "message": "API rate limit exceeded", "reset_at_iso": "2026-10-01T00:00:00Z"},
        ),
        action="unknown",
        action_text="upstream state unknown",
    )
    rep.rows.append(evil)
    return rep


@pytest.fixture(scope="module")
def page(report, tmp_path_factory) -> Path:
    return write_html(report, tmp_path_factory.mktemp("out") / "status.html")


def _expected(report, key, desc: bool) -> list[str]:
    pos = {r.id: i for i, r in enumerate(report.rows)}
    vals = {
        "order": lambda r: r.order or 9999,
        "id": lambda r: r.id.lower(),
        "drift": lambda r: r.drift,
        "action": lambda r: r.action,
    }[key]
    out = sorted(report.rows, key=lambda r: vals(r))
    if desc:  # the page reverses the comparison but keeps ties in page order
        out = sorted(report.rows, key=lambda r: vals(r), reverse=True)
        groups: dict = {}
        for r in out:
            groups.setdefault(vals(r), []).append(r)
        out = [r for g in groups.values() for r in sorted(g, key=lambda r: pos[r.id])]
    return [r.id for r in out]


def test_page_shows_every_row_in_ledger_order(report, page, tmp_path):
    dom = dump_dom(page, "", tmp_path)
    assert dom.ids == [r.id for r in report.rows] and len(dom.ids) == 24
    assert dom.sorted is None


@pytest.mark.parametrize(
    "fragment,key,desc",
    [
        ("#sort=-order", "order", True),
        ("#sort=id", "id", False),
        ("#sort=drift", "drift", False),
        ("#sort=-action", "action", True),
    ],
)
def test_clicking_a_header_sorts(report, page, tmp_path, fragment, key, desc):
    dom = dump_dom(page, fragment, tmp_path)
    assert dom.ids == _expected(report, key, desc)
    assert dom.sorted == ("-" if desc else "") + key
    assert dom.aria == {key: "descending" if desc else "ascending"}
    assert sorted(dom.ids) == sorted(r.id for r in report.rows)  # sorting loses no row


def test_page_is_self_contained_and_escaped(report):
    text = to_html(report)
    assert not re.search(r"""<(script|link|img)[^>]+(src|href)=""", text)
    assert "@import" not in text and "url(" not in text
    assert "<img src=x" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "&lt;script&gt;boom()&lt;/script&gt;" in text and "<script>boom()" not in text
    assert "rate_limit: API rate limit exceeded (resets at 2026-10-01T00:00:00Z)" in text
    assert text.count("<script>") == 1


def test_unknown_sort_key_is_ignored(report, page, tmp_path):
    dom = dump_dom(page, "#sort=nonsense", tmp_path)
    assert dom.ids == [r.id for r in report.rows] and dom.sorted is None
