"""One verdict from the gate's jobs: the planning run plus the per-patch test jobs of the matrix.

The planning job judges the replay and the apply (``gate-artifacts/report.json``); each matrix job
runs one patch's tests (``<dir>/report.json`` with ``tests``). The verdict is the worst of them:
``error`` (exit 2) when a job could not judge, else ``red`` when any found a regression, else
``green``. Writes ``report.md`` (the planning report plus a table of every test) into ``--out``
(``patchset.outdir``'s rule: new, empty, or written by combine before) and sets the step outputs
``verdict``, ``exit_code`` and ``has_series`` (a non-empty refreshed series).

    python -m patchset.ci.scripts.combine --plan gate-artifacts --tests 'tests-*' --out final
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from patchset import atomic, outdir
from patchset.ci.scripts._common import main_guard, set_output
from patchset.errors import InputError
from patchset.text import markdown_cell as _md
from patchset.text import markdown_code

_RANK = {"unchanged": 0, "green": 0, "red": 1, "error": 2}


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the gate report {path}: {exc}") from None


def combine(plan_dir: Path, test_dirs: list[Path]) -> tuple[str, str, bool]:
    """``(verdict, report markdown, has_series)``."""
    plan = _load(plan_dir / "report.json")
    verdict = plan["status"]
    md = (plan_dir / "report.md").read_text(encoding="utf-8") if (plan_dir / "report.md").is_file() else ""
    rows = []
    for d in sorted(test_dirs):
        rep = d / "report.json"
        if not rep.is_file():
            verdict = "error" if _RANK[verdict] < 2 else verdict
            rows.append(f"| {markdown_code(d.name, cell=True)} | - | no report (the job failed before judging) | - |")
            continue
        r = _load(rep)
        if _RANK.get(r["status"], 2) > _RANK.get(verdict, 2):
            verdict = r["status"]
        for t in r.get("tests", []):
            rows.append(
                f"| {markdown_code(t['patch'], cell=True)} | {_md(t['name'])} | {_md(t['status'])} "
                f"({_md(t.get('class', ''))}) | {_md(t['seconds'])} |"
            )
        for e in r.get("errors", []):
            rows.append(f"| {markdown_code(d.name, cell=True)} | - | error: {_md(e)} | - |")
    if rows:
        md += "\n## Per-patch test jobs\n\n| patch | test | result | seconds |\n|---|---|---|---|\n"
        md += "\n".join(rows) + "\n"
    md += f"\n**Verdict: {_md(verdict)}**\n"
    has_series = plan_dir.joinpath("series.patch").is_file() and plan_dir.joinpath("series.patch").stat().st_size > 0
    return verdict, md, has_series


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m patchset.ci.scripts.combine", description=__doc__.splitlines()[0])
    ap.add_argument("--plan", type=Path, required=True, help="the planning job's artifacts directory")
    ap.add_argument("--tests", default="", help="glob of the test jobs' artifact directories")
    ap.add_argument(
        "--out", type=Path, required=True, help="where report.md goes: a new or empty directory, or combine's own"
    )
    args = ap.parse_args(argv)
    # before anything is read: a foreign directory is left alone
    outdir.check(args.out, option="--out", touches=["report.md"])
    dirs = [p for p in Path(".").glob(args.tests) if p.is_dir()] if args.tests else []
    verdict, md, has_series = combine(args.plan, dirs)
    outdir.prepare(args.out, option="--out", command="ci combine", touches=["report.md"])
    atomic.write_text(args.out / "report.md", md)
    code = _RANK.get(verdict, 2)
    set_output("verdict", verdict)
    set_output("exit_code", str(code))
    set_output("has_series", "true" if has_series and verdict == "green" else "false")
    print(f"verdict: {verdict}")
    return 0


if __name__ == "__main__":
    main_guard(main)
