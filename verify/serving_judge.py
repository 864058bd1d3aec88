"""Serving verdicts of ``patchset verify``: the tree with the series against its baseline.

Why this module exists: a serving test measures samples on each side; the verdict compares them
(``verify.serving.compare``) after both sides are measured, and the figures of the tree with the
series can be stored as the baseline of a later run (``--save-baseline``; the gate's last green run).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from patchset.verify.outcomes import WITH, WITHOUT
from patchset.verify.serving import ServingSamples, compare, write_serving_baseline
from patchset.verify.stats import fmt_ratio
from patchset.verify.testrun import ERROR, FAIL, PASS, LongctxResult, ServingResult

if TYPE_CHECKING:
    from patchset.verify.runner import Run


def judge_serving(by_test: dict[tuple[str, str], dict[str, Run]], stored: dict[str, ServingSamples] | None) -> None:
    """Each serving test's verdicts: the tree with the series against its baseline (the tree without
    the patch, or the stored figures): a regression fails the with-run, an improvement the without-run."""
    for (pid, name), sides in by_test.items():
        w = sides.get(WITH)
        if w is None or w.longctx is None or w.longctx.kind != "serving":
            continue
        cfg = w.longctx.serving
        assert cfg is not None
        o = sides.get(WITHOUT)
        base_samples: ServingSamples | None = None
        base_from = ""
        if o is not None:
            base_samples, base_from = o.samples, f"the tree without {pid}"
        elif stored is not None and f"{pid}/{name}" in stored:
            base_samples, base_from = stored[f"{pid}/{name}"], "the stored baseline"
        if w.samples is None or base_samples is None:
            if w.result is None:
                w.result = LongctxResult(
                    ERROR, None, 0.0, f"serving: not compared: no samples of {base_from or 'a baseline'}"
                )
            if o is not None and o.result is None:
                o.result = LongctxResult(
                    ERROR, None, 0.0, "serving: not compared: no samples of the tree with the series"
                )
            continue
        comp = compare(w.samples, base_samples, cfg)
        lines = [v.text() for v in comp.verdicts] + [f"note: {n}" for n in comp.notes]
        worse = comp.regressions
        better = comp.improvements
        w_reason = "regression: " + "; ".join(_short(v) for v in worse) if worse else ""
        if not comp.verdicts:
            w.result = ServingResult(
                ERROR, None, w.samples.seconds, "serving: no metric to judge: " + "; ".join(comp.notes)[:500]
            )
        else:
            w.result = ServingResult(
                FAIL if worse else PASS,
                1 if worse else 0,
                w.samples.seconds,
                w_reason,
                "\n".join(lines),
                w.log,
                w.engine_index,
                w.startup,
                [v.to_json() for v in comp.verdicts],
                reused=w.reused,
                samples=w.samples.to_json(),
                comparison=comp.to_json(),
                baseline_from=base_from,
            )
        o_reason = "without the patch: " + "; ".join(f"{_short(v)} is worse" for v in better) if better else ""
        o_result = ServingResult(
            FAIL if better else PASS,
            1 if better else 0,
            base_samples.seconds,
            o_reason,
            "",
            o.log if o is not None else "",
            o.engine_index if o is not None else None,
            o.startup if o is not None else None,
            [],
            reused=o.reused if o is not None else "stored",
            samples=base_samples.to_json(),
            baseline_from=base_from,
        )
        if o is not None:
            o.result = o_result
        else:
            w.test.without_run = o_result


def _short(v) -> str:
    """``decode tok/s (prompt 32) 0.420 [0.002, 0.699]``: a verdict's metric, median ratio and interval."""
    return f"{v.metric} {fmt_ratio(v.ratio)} [{fmt_ratio(v.low)}, {fmt_ratio(v.high)}]"


def save_serving_baseline(path: Path, runs: list[Run], target: str) -> bool:
    """The serving samples of the tree with the series, per test, for a later ``--baseline``; False
    (nothing written) when no serving test measured anything."""
    tests = {
        f"{r.patch.id}/{r.test.name}": r.samples
        for r in runs
        if r.variant == WITH and r.samples is not None and r.longctx is not None and r.longctx.kind == "serving"
    }
    if not tests:
        return False
    write_serving_baseline(path, tests, target=target)
    return True
