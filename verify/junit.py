"""JUnit XML for ``patchset verify``, so CI systems show each patch's tests like any test suite.

One ``<testsuite>`` per patch, one ``<testcase>`` per declared test (``classname`` = patch id).
``proven`` is a pass; ``broken`` and ``not-needed`` are ``<failure>`` (each asks for a change to
the series); ``error`` is ``<error>``. Both runs' exit status, time and output tail go into
``<system-out>``; the class and the per-run outcomes are ``<properties>``. A long-context test's
runs add the engine's start-up seconds, the check seconds and the engine log path of each tree.
A verdict carried from an earlier run (``verify.plan``) is not a new pass: its case is
``<skipped>`` with the carried class and the run it comes from as properties (a test that fails with
the series tonight is ``broken`` whatever was carried: a failure, as always). Every text goes
through ``patchset.text.xml_text`` (ESC, BEL, lone surrogates shown as escapes): the XML parses.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from patchset import atomic
from patchset.text import xml_text

if TYPE_CHECKING:
    from patchset.verify.outcomes import TestOutcome, VerifyReport


def _run_text(label: str, run) -> str:
    if run is None:
        return f"--- {label}: not run\n"
    head = f"--- {label}: {run.outcome}, exit {run.exit_code}, {run.seconds:.1f} s"
    if run.reason:
        head += f" ({run.reason})"
    if hasattr(run, "startup_seconds"):  # a long-context run: the engine it ran on
        up = "-" if run.startup_seconds is None else f"{run.startup_seconds:.1f} s"
        head += f"\n    engine start-up {up}, checks {run.seconds:.1f} s, engine log {run.log or '-'}"
    return head + "\n" + (run.output or "") + "\n"


def _case(suite: ET.Element, t: TestOutcome) -> tuple[int, int]:
    """One test's ``<testcase>``; returns (failures, errors) it adds."""
    case = ET.SubElement(suite, "testcase", classname=t.patch_id, name=xml_text(t.name), time=f"{t.seconds:.3f}")
    props = ET.SubElement(case, "properties")
    for k, v in (
        ("class", t.klass),
        ("command", t.command),
        ("cwd", t.cwd),
        ("with", t.with_run.outcome if t.with_run else "not run"),
        ("without", t.without_run.outcome if t.without_run else "not run"),
    ):
        ET.SubElement(props, "property", name=k, value=xml_text(v))
    if t.kind in ("longctx", "serving"):
        ET.SubElement(props, "property", name="checks", value=xml_text(", ".join(t.checks)))
        ET.SubElement(props, "property", name="engine", value=xml_text(t.engine or ""))
        for label, run in (("with", t.with_run), ("without", t.without_run)):
            if run is None or not hasattr(run, "startup_seconds"):
                continue
            up = "" if run.startup_seconds is None else f"{run.startup_seconds:.3f}"
            ET.SubElement(props, "property", name=f"{label} engine startup seconds", value=up)
            ET.SubElement(props, "property", name=f"{label} check seconds", value=f"{run.seconds:.3f}")
            ET.SubElement(props, "property", name=f"{label} engine log", value=xml_text(run.log or ""))
    if t.carried:
        ET.SubElement(props, "property", name="carried from", value=xml_text(t.carried))
    if t.without_also:
        ET.SubElement(props, "property", name="without also", value=xml_text(", ".join(t.without_also)))
    failures = errors = 0
    if t.carried and t.klass in ("proven", "not-needed"):
        ET.SubElement(case, "skipped", message=xml_text(f"{t.klass}, {t.carried}"))
    elif t.klass in ("broken", "not-needed"):
        el = ET.SubElement(case, "failure", message=xml_text(f"{t.klass}: {t.note}"), type=t.klass)
        el.text = xml_text(t.note)
        failures = 1
    elif t.klass == "error":
        el = ET.SubElement(case, "error", message=xml_text(t.note), type="error")
        el.text = xml_text(t.note)
        errors = 1
    out = ET.SubElement(case, "system-out")
    out.text = xml_text(_run_text("with the series", t.with_run) + _run_text("without the patch", t.without_run))
    return failures, errors


def render_junit(report: VerifyReport) -> str:
    root = ET.Element("testsuites", name="patchset verify")
    total_f = total_e = total_t = 0
    for p in report.patches:
        suite = ET.SubElement(root, "testsuite", name=p.patch_id, tests=str(len(p.tests)))
        f = e = 0
        for t in p.tests:
            df, de = _case(suite, t)
            f, e = f + df, e + de
        skipped = sum(1 for t in p.tests if t.carried and t.klass in ("proven", "not-needed"))
        seconds = sum(t.seconds for t in p.tests)
        suite.attrib.update(failures=str(f), errors=str(e), skipped=str(skipped), time=f"{seconds:.3f}")
        total_f, total_e, total_t = total_f + f, total_e + e, total_t + len(p.tests)
    root.attrib.update(
        tests=str(total_t), failures=str(total_f), errors=str(total_e), time=f"{report.wall_seconds:.3f}"
    )
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(report: VerifyReport, path: Path) -> None:
    """Write the report as JUnit XML, atomically."""
    atomic.write_text(path, render_junit(report))
