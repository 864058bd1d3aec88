"""The upstream-status dashboard as one static HTML page: no external assets (inline CSS and JS),
every value escaped, sortable by any column.

Every value on the page is data from outside and goes through ``patchset.text.html_text`` (HTML
escaped, quotes included; control and bidi characters shown as ``\x1b`` / ``<U+202E>``); a link
is made only for an http(s) URL (``patchset.text.safe_url``). Only the template is markup.

Sorting: click a column header (again to reverse). The page also reads its URL hash on load and
when it changes: ``page.html#sort=drift`` sorts by drift ascending, ``#sort=-order`` descending;
it does so by clicking the header, so a link (or a headless browser) exercises the same code as a
person. Each cell carries a ``data-sort`` value so numbers and dates sort as such.
"""

from __future__ import annotations

import json
from pathlib import Path

from patchset import atomic
from patchset.text import html_text, safe_url
from patchset.tracker.status import StatusReport, StatusRow
from patchset.tracker.views import ACTION_WORDS, detail_cell, upstream_cell

# (key, header, numeric)
COLUMNS: list[tuple[str, str, bool]] = [
    ("target", "target", False),
    ("order", "#", True),
    ("id", "patch", False),
    ("origin", "origin", False),
    ("state", "upstream", False),
    ("pr", "pull request", False),
    ("detail", "detail", False),
    ("drift", "drift", False),
    ("action", "action", False),
    ("age", "data", True),
]

_CSS = """
:root { --fg:#1d2330; --muted:#667085; --line:#e4e7ec; --bg:#fff; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); margin: 24px; }
h1 { font-size: 20px; margin: 0 0 4px; }
.meta { color: var(--muted); margin: 0 0 12px; }
.warn { background: #fff7e6; border-left: 4px solid #f5a623; padding: 6px 10px; margin: 6px 0; }
.err { background: #fdecea; border-left: 4px solid #d93025; padding: 6px 10px; margin: 6px 0; }
.chips span { display: inline-block; border: 1px solid var(--line); border-radius: 12px; padding: 1px 10px;
              margin: 0 6px 6px 0; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid var(--line); padding: 6px 8px; text-align: left; vertical-align: top; }
th { position: sticky; top: 0; background: #f8f9fb; cursor: pointer; user-select: none; white-space: nowrap; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.inactive td { color: var(--muted); }
code { font-size: 12px; white-space: nowrap; }
.s-merged { color: #8e24aa; font-weight: 600; } .s-open { color: #1e8e3e; font-weight: 600; }
.s-draft { color: #00838f; font-weight: 600; } .s-closed { color: #d93025; font-weight: 600; }
.s-unknown { color: #b06000; } .s-none { color: var(--muted); }
.a-drop-at-rebase { color: #8e24aa; font-weight: 600; } .a-refresh { color: #b06000; font-weight: 600; }
.a-upstream { color: #1a73e8; } .a-held { color: #b06000; } .a-nothing { color: #1e8e3e; }
.a-dropped { color: var(--muted); } .a-unknown { color: #d93025; font-weight: 600; }
.d-revised, .d-merged-with-changes, .d-head-moved { color: #b06000; font-weight: 600; }
.d-closed-unmerged { color: #d93025; } .d-unchanged { color: #1e8e3e; }
.rowerr { color: #d93025; display: block; font-size: 12px; }
.small { color: var(--muted); font-size: 12px; display: block; }
"""

_JS = """
(function () {
  var table = document.getElementById('status');
  var body = table.tBodies[0];
  var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
  function value(row, i, numeric) {
    var v = row.cells[i].getAttribute('data-sort');
    if (v === null) { v = row.cells[i].textContent; }
    if (numeric) { var n = parseFloat(v); return isNaN(n) ? Infinity : n; }
    return v.toLowerCase();
  }
  function sortBy(th, dir) {
    var i = heads.indexOf(th), numeric = th.getAttribute('data-type') === 'num';
    var rows = Array.prototype.slice.call(body.rows).map(function (r, k) { return [r, k]; });
    rows.sort(function (a, b) {
      var x = value(a[0], i, numeric), y = value(b[0], i, numeric);
      var c = x < y ? -1 : (x > y ? 1 : 0);
      if (c === 0) { c = parseInt(a[0].getAttribute('data-pos'), 10) - parseInt(b[0].getAttribute('data-pos'), 10); return c; }
      return dir === 'descending' ? -c : c;
    });
    rows.forEach(function (p) { body.appendChild(p[0]); });
    heads.forEach(function (h) { h.removeAttribute('aria-sort'); });
    th.setAttribute('aria-sort', dir);
    var key = (dir === 'descending' ? '-' : '') + th.getAttribute('data-key');
    document.body.setAttribute('data-sorted', key);
    if (window.history && history.replaceState) { history.replaceState(null, '', '#sort=' + key); }
  }
  heads.forEach(function (th) {
    th.addEventListener('click', function () {
      sortBy(th, th.getAttribute('aria-sort') === 'ascending' ? 'descending' : 'ascending');
    });
  });
  function fromHash() {
    var m = /sort=(-?)([a-z_]+)/.exec(window.location.hash || '');
    if (!m) { return; }
    var th = heads.filter(function (h) { return h.getAttribute('data-key') === m[2]; })[0];
    if (!th) { return; }
    if (document.body.getAttribute('data-sorted') === m[1] + m[2]) { return; }
    th.removeAttribute('aria-sort');
    th.click();
    if (m[1] === '-') { th.click(); }
  }
  window.addEventListener('hashchange', fromHash);
  fromHash();
})();
"""


def _e(text: object) -> str:
    return html_text(text)


def _age(r: StatusRow) -> float:
    from time import time

    from patchset.tracker.status import age_seconds

    if r.pr is None:
        return float("inf")
    age = age_seconds(r.pr, time())
    return float("inf") if age is None else age


def _row(r: StatusRow, pos: int) -> str:
    state = r.upstream_state
    pr_text = upstream_cell(r)
    pr_html = _e(pr_text)
    url = safe_url(r.pr.url) if r.pr is not None else None
    if url is not None:
        pr_html = f'<a href="{_e(url)}">{pr_html}</a>'
    if r.pr is not None and r.pr.title:
        pr_html += f'<span class="small">{_e(r.pr.title)}</span>'
    if r.error:
        pr_html += f'<span class="rowerr">{_e(r.error)}</span>'
    action = f"<b>{_e(ACTION_WORDS.get(r.action, r.action))}</b>"
    if r.action_text:
        action += f'<span class="small">{_e(r.action_text)}</span>'
    detail = _e(detail_cell(r))
    if r.notes:
        detail += "".join(f'<span class="small">{_e(n)}</span>' for n in r.notes)
    pid = f"<code>{_e(r.id)}</code>" + (f' <b class="small">{_e(r.state)}</b>' if r.state != "active" else "")
    if r.title:
        pid += f'<span class="small">{_e(r.title)}</span>'
    age = _age(r)
    cells = [
        f'<td data-sort="{_e(r.target)}">{_e(r.target)}</td>',
        f'<td class="num" data-sort="{_e(r.order or 9999)}">{_e(r.order or "")}</td>',
        f'<td data-sort="{_e(r.id)}">{pid}</td>',
        f"<td>{_e(r.origin)}</td>",
        f'<td class="s-{_e(state)}" data-sort="{_e(state)}">{_e(state)}</td>',
        f'<td data-sort="{_e(r.pr.ref if r.pr else "~")}">{pr_html}</td>',
        f"<td>{detail}</td>",
        f'<td class="d-{_e(r.drift)}" data-sort="{_e(r.drift)}">{_e(r.drift)}</td>',
        f'<td class="a-{_e(r.action)}" data-sort="{_e(r.action)}">{action}</td>',
        f'<td class="num" data-sort="{"" if age == float("inf") else round(age)}">{_e(r.data)}</td>',
    ]
    cls = ' class="inactive"' if r.state != "active" else ""
    return f'<tr{cls} data-id="{_e(r.id)}" data-pos="{pos}">' + "".join(cells) + "</tr>"


def to_html(report: StatusReport) -> str:
    """The whole page as one string."""
    title = "Upstream status" + (f": {report.title}" if report.title else "")
    heads = "".join(
        f'<th data-key="{k}"{" data-type=" + chr(34) + "num" + chr(34) if num else ""} scope="col">{_e(h)}</th>'
        for k, h, num in COLUMNS
    )
    rows = "\n".join(_row(r, i) for i, r in enumerate(report.rows))
    chips = "".join(
        f"<span>{n} {_e(ACTION_WORDS.get(a, a))}</span>" for a, n in sorted(report.counts("action").items())
    )
    warns = "".join(f'<div class="warn">{_e(w)}</div>' for w in report.warnings)
    warns += "".join(f'<div class="warn">interrupted: {_e(i.message)}</div>' for i in report.interrupted)
    errors = report.errors()
    errs = ""
    if errors:
        kinds: dict[str, int] = {}
        for e in errors:
            kind = e.split(": ")[2] if e.count(": ") >= 2 else "error"
            kinds[kind] = kinds.get(kind, 0) + 1
        summary = ", ".join(f"{k} ({n})" for k, n in sorted(kinds.items()))
        errs = (
            f'<details class="err"><summary>{len(errors)} upstream read(s) failed: {_e(summary)}; '
            f"those rows show the last recorded state</summary><ul>"
            + "".join(f"<li>{_e(e)}</li>" for e in errors)
            + "</ul></details>"
        )
    meta = (
        f"ledger <code>{_e(report.ledger)}</code> · mode <b>{_e(report.mode)}</b> · generated "
        f"{_e(report.generated_at)} · data: {_e(report.oldest())}"
    )
    data = _e(json.dumps({"rows": len(report.rows), "mode": report.mode}))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
<style>{_CSS}</style></head>
<body data-report="{data}">
<h1>{_e(title)}</h1>
<p class="meta">{meta}</p>
{warns}{errs}
<div class="chips">{chips}</div>
<table id="status"><thead><tr>{heads}</tr></thead>
<tbody>
{rows}
</tbody></table>
<script>{_JS}</script>
</body></html>
"""


def write_html(report: StatusReport, path: Path) -> Path:
    """Write the page atomically; returns the path."""
    atomic.write_text(Path(path), to_html(report))
    return Path(path)
