"""The gate's artifacts directory: what a CI job uploads and a human reads after a run.

``report.json`` (the whole ``GateReport``), ``report.md`` (the same for an issue or a pull
request body), ``junit.xml`` (one test case per patch replay, one for the apply, one per selected
test: CI systems show them as tests), ``series.patch`` (the refreshed series as a patch against
this repository; empty when there is nothing to refresh) and ``logs/`` (the gate's log, the
rebase and apply reports, one file per test). Every file is written atomically.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from patchset import atomic, outdir
from patchset.ci.report import (
    ERROR,
    GREEN,
    RED,
    UNCHANGED,
    GateReport,
    describe_commit,
    headline,
    longctx_rows,
    newest_safe_line,
    plan_lines,
    report_from_json,
)
from patchset.text import html_inline, markdown_block, markdown_cell, markdown_code, xml_text

SUITE = "patchset-gate"


def write_json(path: Path, data: Any) -> None:
    atomic.write_text(path, json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")


_md = markdown_cell
_code = markdown_code


MAX_REPORT = 64 << 20  # bytes of an earlier report.json read back


def markdown(r: GateReport) -> str:
    """``report.md``. Every value (commit subjects, paths, ids, messages, test output) is data:
    it goes through ``patchset.text``'s Markdown sanitisers, so none adds a cell, a row, HTML,
    a link, or breaks out of its code span or block. An unchanged run: its headline over the
    report of the verdict that stands."""
    if r.status == UNCHANGED and r.verdict_report:
        return _unchanged_markdown(r)
    return _markdown(r)


def _unchanged_markdown(r: GateReport) -> str:
    """The headline of an unchanged run, then the report of the verdict that stands (whose
    junit.xml, series.patch and logs/ are kept beside it)."""
    try:
        then = _markdown(report_from_json(r.verdict_report))
    except (TypeError, KeyError, AttributeError, ValueError):
        then = ""
    out = [
        f"# {_md(headline(r))}",
        "",
        "The verdict below stands: `junit.xml`, `series.patch` and `logs/` are that run's.",
        "",
    ]
    if then:
        out += ["---", "", "#" + then]  # its headline one level down
    return "\n".join(out)


def _markdown(r: GateReport) -> str:
    """The report of one judging run, a section at a time (each empty when it has nothing to say)."""
    return "\n".join(line for section in _SECTIONS for line in section(r))


def _summary(r: GateReport) -> list[str]:
    out = [f"# {_md(headline(r))}", ""]
    up = r.upstream
    out += [
        f"- upstream: {_md(up.get('kind', '?'))} {_code(up.get('location', ''))}",
        f"- judged: {_code(r.onto or r.asked)}" + (f" at {_code(r.commit)}" if r.commit else ""),
        f"- series base: {_code(r.base)}" + (f" ({_code(r.base_commit[:12])})" if r.base_commit else ""),
    ]
    if r.previous:
        out.append(
            f"- previous run: {_md(r.previous.get('verdict'))} at {_code(r.previous.get('judged_label', ''))}; "
            f"last clean replay {_code(r.previous.get('last_clean_label', '') or '-')}"
        )
    out.append(f"- exit code: {r.exit_code} ({_md(r.status)})")
    if r.judged_at:
        out.append(f"- run: {_md(r.judged_at)}")
    if r.image.get("image") and r.image.get("image") != r.image.get("base_image"):
        out.append(
            f"- image: {_code(r.image['image'])} (base_image {_code(r.image.get('base_image', ''))} names the base)"
        )
    elif r.image.get("why"):
        out.append(f"- image: {_md(r.image['why'])}")
    out.append("")
    return out


def _newest_safe_and_builds(r: GateReport) -> list[str]:
    out: list[str] = []
    if r.newest_safe:
        out += ["## Newest safe upstream", "", _md(newest_safe_line(r.newest_safe, command=False)), ""]
        if r.newest_safe.get("command"):
            out += [markdown_block(r.newest_safe["command"]), ""]
    for kind, b in r.build.items():
        out.append(f"- build {_md(kind)}: {'ok' if b.get('ok') else 'refused'}: {_md(b.get('message', ''))}")
    return out


def _problems(r: GateReport) -> list[str]:
    out: list[str] = []
    reasons = r.reasons()
    if reasons:
        out += ["## Regressions", ""] + [f"- {_md(x)}" for x in reasons] + [""]
    if r.errors:
        out += ["## Errors", ""] + [f"- {_md(x)}" for x in r.errors] + [""]
    return out


def _series(r: GateReport) -> list[str]:
    patches = r.rebase.get("patches", [])
    if not patches:
        return []
    out = ["## Series", "", "| # | patch | replay | first bad upstream commit |", "|---|---|---|---|"]
    for i, p in enumerate(patches, 1):
        verdict = p["verdict"] + (f" ({p['how']})" if p.get("how") else "")
        fb = describe_commit(r.first_bad.get(p["id"], {}).get("commit")) or "-"
        out.append(f"| {i} | {_code(p['id'], cell=True)} | {_md(verdict)} | {_md(fb)} |")
    out.append("")
    for p in patches:
        if p["verdict"] == "conflict":
            out += _conflict(r, p)
    return out


def _conflict(r: GateReport, p: dict[str, Any]) -> list[str]:
    """One conflicting patch: its files and hunks with the upstream commits blamed, its first bad commit."""
    out = [f"### {_code(p['id'])} conflicts"]
    for f in p["files"]:
        if f["how"] not in ("conflict", "broken"):
            continue
        out.append(f"- {_code(f['path'])}: {_md(f.get('message') or f['how'])}")
        for h in f.get("hunks", []):
            subjects = "; ".join(f"{c['sha'][:12]} {c['subject']}" for c in h.get("commits", []))
            blamed = _md(subjects) or "(no upstream commit blamed)"
            out.append(f"  - hunk #{_md(h['index'])} near line {_md(h['line'])}: upstream {blamed}")
    bad = r.first_bad.get(p["id"])
    if bad and bad.get("commit"):
        out.append(
            f"- first bad upstream commit: {_md(describe_commit(bad['commit']))}; last good "
            f"{_code(bad['last_good'][:12])} ({_md(bad['range_size'])} commits searched, "
            f"{_md(bad['probes'])} replays)"
        )
    out.append("")
    return out


def _apply(r: GateReport) -> list[str]:
    if not r.apply:
        return []
    out = [
        "## Apply to a fresh tree",
        "",
        f"{_md(r.apply.get('outcome'))}: {_md(r.apply.get('message', ''))}",
        "",
    ]
    if r.apply.get("mismatched"):
        out += [f"- lock mismatch: {_code(m)}" for m in r.apply["mismatched"]] + [""]
    return out


def _tests(r: GateReport) -> list[str]:
    if not (r.tests or r.tags):
        return []
    out = [f"## Tests (tags: {_md(', '.join(r.tags) or 'none')})", ""]
    if not r.tests:
        return [*out, "No test of the series carries these tags.", ""]
    out += ["| patch | test | kind | result | class | seconds |", "|---|---|---|---|---|---|"]
    out += [
        f"| {_code(t['patch'], cell=True)} | {_md(t['name'])} | {_md(t.get('kind', 'command'))} | {_md(t['status'])} "
        f"| {_md(t.get('class', ''))} | {_md(t['seconds'])} |"
        for t in r.tests
    ]
    out.append("")
    return out + _longctx(r) + _plan(r) + _failed_tails(r)


def _longctx(r: GateReport) -> list[str]:
    lc = longctx_rows(r)
    if not lc:
        return []
    out = [
        "### Long-context tests",
        "",
        "| patch | test | checks | with the series | without the patch | class | engine logs |",
        "|---|---|---|---|---|---|---|",
    ]
    out += [
        f"| {_code(x['patch'], cell=True)} | {_md(x['test'])} | {_md(x['checks'])} | {_md(x['with'])} | "
        f"{_md(x['without'])} | {_md(x['class'])} | {_md(x['logs'])} |"
        for x in lc
    ]
    out.append("")
    return out


def _plan(r: GateReport) -> list[str]:
    plan = plan_lines(r)
    if not plan:
        return []
    return ["### What was proven tonight and what was carried", ""] + [f"- {_md(line)}" for line in plan] + [""]


def _failed_tails(r: GateReport) -> list[str]:
    out: list[str] = []
    for t in r.failed_tests:
        out += [
            # raw HTML: Markdown's escapes do not apply inside it, HTML's do
            f"<details><summary>{html_inline(t['patch'])}/{html_inline(t['name'])}: "
            f"{html_inline(t['status'])}</summary>",
            "",
            markdown_block(t.get("tail", "")),
            "",
            "</details>",
            "",
        ]
    return out


def _upstream_status(r: GateReport) -> list[str]:
    st = r.upstream_status
    if not st.get("actions"):
        return []
    out = ["## Upstream status", "", f"Mode {_code(st.get('mode'))}; data: {_md(st.get('data_age', ''))}.", ""]
    out += [f"- {_code(a['id'])}: {_md(a['action'])}: {_md(a['text'])}" for a in st["actions"]]
    out.append("")
    return out


def _refreshed(r: GateReport) -> list[str]:
    if not r.series_patch.get("files"):
        return []
    path = r.series_patch["path"]
    out = [
        "## Refreshed series",
        "",
        f"{_code(path)} changes {len(r.series_patch['files'])} files "
        f"({_code(f'git apply {path}')} at the top of the repository):",
        "",
    ]
    return out + [f"- {_code(f)}" for f in r.series_patch["files"]] + [""]


def _closing(r: GateReport) -> list[str]:
    out: list[str] = []
    if r.warnings:
        out += ["## Warnings", ""] + [f"- {_md(w)}" for w in r.warnings] + [""]
    timing = ", ".join(f"{_md(k)} {v:.2f} s" for k, v in r.timings.items())
    return [*out, f"Took {r.seconds:.2f} s ({timing})." if timing else f"Took {r.seconds:.2f} s.", ""]


_SECTIONS = (
    _summary,
    _newest_safe_and_builds,
    _problems,
    _series,
    _apply,
    _tests,
    _upstream_status,
    _refreshed,
    _closing,
)


def _xml_safe(root: ET.Element) -> None:
    """Every text, tail, attribute name and value of the tree made valid XML 1.0 character data
    (``patchset.text.xml_text``): a commit subject or a test's output with ESC or BEL in it
    must not make ``junit.xml`` unreadable."""
    for el in root.iter():
        if el.text:
            el.text = xml_text(el.text)
        if el.tail:
            el.tail = xml_text(el.tail)
        if el.attrib:
            el.attrib = {xml_text(k): xml_text(v) for k, v in el.attrib.items()}


def _properties(case: ET.Element) -> ET.Element:
    found = case.find("properties")
    return ET.SubElement(case, "properties") if found is None else found


def junit(r: GateReport) -> bytes:
    suite = ET.Element("testsuite", name=SUITE)

    def case(classname: str, name: str, seconds: float = 0.0) -> ET.Element:
        return ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{seconds:.3f}")

    if r.status == ERROR:
        c = case("gate", "judge upstream")
        e = ET.SubElement(c, "error", message="; ".join(r.errors)[:500] or "infrastructure failure")
        e.text = "\n".join(r.errors)
    for p in r.rebase.get("patches", []):
        c = case("replay", p["id"])
        if p["verdict"] == "conflict":
            fb = describe_commit(r.first_bad.get(p["id"], {}).get("commit"))
            f = ET.SubElement(c, "failure", message=f"conflicts on {r.onto}" + (f"; first bad: {fb}" if fb else ""))
            f.text = "\n".join(
                f"{x['path']}: {x.get('message') or x['how']}" for x in p["files"] if x["how"] in ("conflict", "broken")
            )
        else:
            out = ET.SubElement(c, "system-out")
            out.text = p["verdict"] + (f" ({p['how']})" if p.get("how") else "")
    if r.apply:
        c = case("apply", r.target or "series")
        if r.apply.get("outcome") == "skipped":
            ET.SubElement(c, "skipped", message=r.apply.get("message", ""))
        elif r.apply.get("outcome") != "applied":
            f = ET.SubElement(c, "failure", message=r.apply.get("message", "")[:500])
            f.text = "\n".join(r.apply.get("mismatched", []))
    for t in r.tests:
        c = case(f"tests.{t['patch']}", t["name"], t["seconds"])
        for label, run in (t.get("longctx") or {}).items():
            if run:
                props = _properties(c)
                up = run.get("engine_startup_seconds")
                for k, v in (
                    (f"{label} engine startup seconds", "" if up is None else f"{up:.3f}"),
                    (f"{label} check seconds", f"{run.get('check_seconds', 0.0):.3f}"),
                    (f"{label} engine log", run.get("engine_log") or ""),
                ):
                    ET.SubElement(props, "property", name=k, value=str(v))
        if t.get("carried"):  # the class is carried: a property, never a new pass of its own
            props = _properties(c)
            ET.SubElement(props, "property", name="class", value=str(t.get("class", "")))
            ET.SubElement(props, "property", name="carried from", value=str(t["carried"]))
        if t["status"] != "passed":
            f = ET.SubElement(c, "failure", message=f"{t['command']}: {t['status']}")
            f.text = t.get("tail", "")
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    for count, tag in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
        suite.set(count, str(sum(1 for c in cases if c.find(tag) is not None)))
    suite.set("time", f"{r.seconds:.3f}")
    root = ET.Element("testsuites")
    root.append(suite)
    _xml_safe(root)
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8") + b"\n"


# dist/, image/: --build (overlay/: where the image context went before it was image/)
OWN = ("report.json", "report.md", "junit.xml", "series.patch", "logs", "dist", "image", "overlay")


def prepare(directory: Path) -> Path:
    """``directory`` ready for this run's artifacts: absent or empty (then marked as patchset's), or
    marked by an earlier run (then what that run wrote is removed, so its results cannot pass for
    this one's). A directory holding anyone else's files is refused (``InputError``, exit 2) and
    left untouched: ``--artifacts ~`` must not delete a ``dist/`` or ``logs/`` patchset did not write."""
    clear(claim(directory))
    return directory


def claim(directory: Path) -> Path:
    """``directory`` checked and marked as the gate's (``outdir.prepare``), nothing removed yet:
    a run that finds upstream unchanged keeps the last verdict's files (``kept_verdict``)."""
    outdir.prepare(directory, option="--artifacts", command="gate", touches=OWN)
    return directory


def kept_verdict(directory: Path, judged: str, judged_at: str) -> dict[str, Any] | None:
    """The report of the run that recorded the judgement (``judged`` at ``judged_at``) when its
    artifacts are still in ``directory``: its ``report.json`` (or the one an unchanged run kept
    inside its own). None when they are another run's, absent, or unreadable: then they must go."""
    if not outdir.is_owned(directory):
        return None
    try:
        with open(directory / "report.json", "rb") as f:
            raw = f.read(MAX_REPORT + 1)
        doc = json.loads(raw) if len(raw) <= MAX_REPORT else None
    except (OSError, ValueError):
        return None
    if isinstance(doc, dict) and doc.get("status") == UNCHANGED:
        doc = doc.get("verdict_report")
    if not isinstance(doc, dict) or doc.get("status") not in (GREEN, RED):
        return None
    return doc if judged_at and (doc.get("commit"), doc.get("judged_at")) == (judged, judged_at) else None


def clear(directory: Path) -> None:
    """Remove what an earlier run wrote into ``directory`` (only the gate's own files, and only in a
    directory that carries patchset's marker)."""
    if not outdir.is_owned(directory):
        return
    for name in OWN:
        p = directory / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def write(r: GateReport, directory: Path, *, series_patch: bytes | None = None) -> None:
    """Write every artifact of ``r`` into ``directory`` (an unchanged run writes only the reports)."""
    directory.mkdir(parents=True, exist_ok=True)
    if series_patch is not None:
        atomic.write_bytes(directory / "series.patch", series_patch)
    write_json(directory / "report.json", r.to_json())
    atomic.write_text(directory / "report.md", markdown(r))
    if r.status != UNCHANGED:
        atomic.write_bytes(directory / "junit.xml", junit(r))
