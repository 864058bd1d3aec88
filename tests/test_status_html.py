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


# ---- a dashboard people use (issue #27, item 4) --------------------------------------------------
MEASURE = """<script>
(function () {
  var de = document.documentElement, b = document.body;
  b.setAttribute('data-scroll', de.scrollWidth + ' ' + de.clientWidth);
  var broken = Array.prototype.filter.call(document.querySelectorAll('.id:not(.id-long)'), function (e) {
    return e.getClientRects().length > 1;
  }).map(function (e) { return e.textContent; });
  b.setAttribute('data-broken', JSON.stringify(broken));
  b.setAttribute('data-links', JSON.stringify(Array.prototype.map.call(document.querySelectorAll('a[href]'),
    function (a) { return a.getAttribute('href'); })));
  b.setAttribute('data-visible', JSON.stringify(Array.prototype.filter.call(document.querySelectorAll('tr[data-id]'),
    function (r) { return r.offsetParent !== null; }).map(function (r) { return r.getAttribute('data-id'); })));
})();
</script>"""


class Body(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.attrs: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":
            self.attrs = {k: v or "" for k, v in attrs}


def measure(html: str, fragment: str, tmp: Path, width: int = 1280) -> dict:
    """The page at ``width`` px in headless Chromium: its scroll and client widths, the ids that
    wrapped, the links, the rows left visible by the filters in ``fragment``."""
    import json

    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the page test needs a real browser")
    page = tmp / "measured.html"
    page.write_text(html.replace("</body>", MEASURE + "</body>"))
    cmd = [
        CHROMIUM,
        *FLAGS,
        f"--window-size={width},900",
        f"--user-data-dir={tmp / 'chromium-profile'}",
        "--dump-dom",
        page.resolve().as_uri() + fragment,
    ]
    proc = subprocess.run(cmd, capture_output=True, timeout=90)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    body = Body()
    body.feed(proc.stdout.decode("utf-8"))
    scroll, client = (int(x) for x in body.attrs["data-scroll"].split())
    return {
        "scroll": scroll,
        "client": client,
        "broken": json.loads(body.attrs["data-broken"]),
        "links": json.loads(body.attrs["data-links"]),
        "visible": json.loads(body.attrs["data-visible"]),
        "shown": body.attrs.get("data-shown"),
    }


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    """The follow-ups world after a refresh (links to PRs, issues, follow-ups, merge commits),
    with the real ledger's rows and a hostile row appended: the widest page there is."""
    from tests.support.fakehub.server import FakeHub
    from tests.test_followups import LEDGER, TOKEN, _hub, client

    tmp = tmp_path_factory.mktemp("busy")
    led = tmp / "led" / "patches.toml"
    led.parent.mkdir()
    led.write_text(LEDGER)
    data = _hub()
    data["repos"]["acme/demo"]["pulls"]["201"]["merge_commit_sha"] = "ab" * 20
    with FakeHub(data) as hub:
        assert TOKEN in data["tokens"]
        rep = status(led, refresh=True, client=client(hub, tmp), histories={})
    real = tmp / "real"
    real.mkdir()
    shutil.copy(REPO_ROOT / "patches.toml", real / "patches.toml")
    rep.rows += status(
        real / "patches.toml",
        client=make_client(offline=True, base_url="http://127.0.0.1:9/api/v3", cache_dir=tmp / "cache"),
        histories={},
    ).rows
    rep.rows.append(
        StatusRow(
            order=99,
            id="zz-" + "x" * 120,  # longer than any real id: it may wrap, and must not widen the page
            target="vllm",
            title="A" * 300 + " " + "https://example.invalid/" + "y" * 200,
            origin="ours",
            state="active",
            action="upstream",
            action_text="no upstream PR; " + "z" * 150,
        )
    )
    return rep


def test_no_horizontal_scroll_at_1280_px_ids_never_break_and_every_ref_is_a_link(busy, tmp_path):
    got = measure(to_html(busy), "", tmp_path)
    assert got["scroll"] <= got["client"], got["scroll"]
    assert got["broken"] == []
    links = got["links"]
    assert all(u.startswith(("http://", "https://")) for u in links)
    pulls = {u.rsplit("/", 1)[-1] for u in links if "/acme/demo/pull/" in u}
    assert {"201", "202", "203", "301", "302", "303", "305"} <= pulls  # PRs and their follow-ups
    assert any(u.endswith("/acme/demo/issues/401") for u in links)  # an issue naming one
    assert any(u.endswith("/acme/demo/commit/" + "ab" * 20) for u in links)  # a merge commit
    assert "https://github.com/vllm-project/vllm/pull/57632" in links  # recorded rows link too
    assert "https://github.com/NVIDIA/nccl/issues/2334" in links


def test_filters_by_target_action_and_state(busy, tmp_path):
    every = [r.id for r in busy.rows]
    got = measure(to_html(busy), "#action=follow-up", tmp_path)
    assert got["visible"] == [r.id for r in busy.rows if r.action == "follow-up"] == ["u202"]
    got = measure(to_html(busy), "#target=nccl&state=open", tmp_path)
    assert got["visible"] == ["pr2393-v2.30.7"] and got["shown"] == "1"
    got = measure(to_html(busy), "#target=nowhere", tmp_path)  # an unknown value filters nothing
    assert got["visible"] == every


def test_the_page_says_what_mode_and_the_legend_mean(busy):
    text = to_html(busy)
    assert "asked GitHub now" in text  # the refresh's mode in words
    assert "<b>n/a</b>" in text and "<b>unknown</b>" in text and "<b>not read</b>" in text
    assert "reverted by" in text and "follow-up merged" in text and "upstream reverted it" in text
