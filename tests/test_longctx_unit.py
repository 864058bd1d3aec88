"""Unit tests of the long-context checks: threshold logic, report, and every check against a local
HTTP server on 127.0.0.1 that speaks vLLM's completions schema (``tests.support.completions_double``:
its docstring says where it differs from vLLM).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from patchset.commands.table import Term
from patchset.errors import InputError
from patchset.verify.engines.client import CompletionsClient, NotCompletionsServer, ServerUnreachable, parse_completion
from patchset.verify.longctx.measures import max_abs_diff, topk_drift
from patchset.verify.longctx.params import BASELINE_DIR, Lengths, Thresholds, load_baseline
from patchset.verify.longctx.report import LongctxReport
from patchset.verify.longctx.suite import LongctxRun, run_checks
from patchset.verify.longctx.view import longctx_text, render_longctx
from tests.support.completions_double import CompletionsDouble, serving


@pytest.fixture
def serve() -> Iterator[Any]:
    with ExitStack() as stack:

        def start(**kwargs: Any) -> tuple[str, CompletionsDouble]:
            return stack.enter_context(serving(**kwargs))

        yield start


def _by_case(report: LongctxReport, check: str) -> dict[str, bool]:
    return {m.case: m.ok for m in report.result(check).measurements}


# ------------------------------------------------------------------ thresholds and numbers


def test_fixed_bar_and_control_rule() -> None:
    fixed = Thresholds(mode="fixed", fixed={"resume": 0.01})
    assert fixed.bar("resume") == 0.01
    assert fixed.passes("resume", 0.009) and not fixed.passes("resume", 0.011)
    control = Thresholds(mode="control")
    # The maintainer's P1 example: drift 0.237 against a control of 0.089 fails 2x the control.
    assert control.bar("resume", 0.089) == pytest.approx(0.178)
    assert not control.passes("resume", 0.237, 0.089)
    assert control.passes("resume", 0.150, 0.089)
    # A zero control (a deterministic engine) falls back to the floor, not to a zero bar.
    assert control.bar("causality", 0.0) == control.floor
    assert not control.passes("causality", 2 * control.floor, 0.0)
    # reference and copy keep their fixed bar in control mode.
    assert control.bar("reference", 123.0) == control.fixed["reference"]
    # A drift that could not be measured never passes, nor does one whose control could not be.
    assert not fixed.passes("resume", None) and not fixed.passes("resume", math.nan)
    assert not control.passes("resume", 0.0, None) and not control.passes("resume", 0.0, math.inf)
    assert math.isnan(control.bar("rescore", math.nan))


def test_bad_threshold_settings_are_input_errors() -> None:
    with pytest.raises(InputError, match="fixed' or 'control"):
        Thresholds(mode="median")
    with pytest.raises(InputError, match="multiple"):
        Thresholds(mode="control", multiple=0)


def test_drift_helpers() -> None:
    assert max_abs_diff([None, -1.0, -2.0], [None, -1.0, -2.5]) == (0.5, 2)
    assert max_abs_diff([None, -1.0], [None, None])[0] == math.inf  # a missing logprob is a failure
    assert topk_drift({1: -0.1, 2: -2.0}, {1: -0.1, 2: -2.0}) == 0.0
    assert topk_drift({1: -0.1, 2: -2.0}, {1: -0.3, 2: -2.0}) == pytest.approx(0.2)
    # token 3 fell out of the warm top-k: the drift is at least its cold logprob minus the warm floor
    assert topk_drift({1: -0.1, 3: -1.0}, {1: -0.1, 2: -3.0}) == pytest.approx(2.0)
    assert topk_drift({}, {1: -1.0}) == math.inf


def test_malformed_answers_become_bad_response() -> None:
    from patchset.verify.engines.client import BadResponse

    with pytest.raises(BadResponse):
        parse_completion({"choices": [{"logprobs": "oops"}]})
    with pytest.raises(BadResponse, match="token id"):
        parse_completion({"choices": [{"logprobs": {"tokens": ["hello"]}}]})
    ok = parse_completion(
        {
            "choices": [{"prompt_logprobs": [None, {"7": {"logprob": -1.5}}]}],
            "usage": {"prompt_tokens": 2, "prompt_tokens_details": {"cached_tokens": 0}},
        }
    )
    assert ok.prompt_token_logprobs([3, 7]) == [None, -1.5] and ok.usage.cached_tokens == 0


def test_lengths_validation() -> None:
    assert Lengths.coerce({"causal": [500, 2500], "total": 3000}).causal == (500, 2500)
    with pytest.raises(InputError, match="causal"):
        Lengths.coerce({"causal": [5000]})
    with pytest.raises(InputError, match="unknown key"):
        Lengths.coerce({"totl": 4096})


def test_baselines_load() -> None:
    _, cpu = load_baseline(BASELINE_DIR / "cpu-vllm-0.30.0.json")
    assert {(c.warm_tokens, c.cached_tokens) for c in cpu} >= {(1024, 1024), (4096, 4096)}
    meta, prod = load_baseline(BASELINE_DIR / "production-spark.json")
    assert [c.cached_tokens for c in prod] == [18432, 18432, 18432, 16128, 16128, 18432]
    assert meta["block_size"] == 2304
    assert all(c.cached_tokens % 2304 == 0 and c.warm_tokens >= c.cached_tokens for c in prod)
    p1 = meta["control_examples"][0]
    rule = Thresholds(mode="control", multiple=meta["control_rule"]["multiple"])
    assert rule.passes("resume", p1["drift"], p1["control"]) is (p1["verdict"] == "pass")


def test_bad_baseline_is_input_error(tmp_path: Path) -> None:
    bad = tmp_path / "b.json"
    bad.write_text('{"cached": [{"warm_tokens": 10}]}')
    with pytest.raises(InputError, match="cached\\[0\\]"):
        load_baseline(bad)
    bad.write_text("{nope")
    with pytest.raises(InputError, match="not valid JSON"):
        load_baseline(bad)


# ------------------------------------------------------------------ against the local server


def test_healthy_server_passes_every_check(serve: Any) -> None:
    url, _ = serve()
    report = run_checks(LongctxRun(url, mode="fixed"))
    assert report.ok, report.to_json()
    assert report.exit_code == 0
    assert [r.name for r in report.results] == ["causality", "resume", "cached", "rescore"]
    data = json.loads(report.to_json())
    resume = data["checks"][1]["measurements"]
    assert [m["details"]["cached_tokens"] for m in resume] == [1024, 2048, 3072, 4096]
    assert data["checks"][3]["measurements"][0]["details"]["max_past_boundary"] == 0.0


def test_http_400_on_a_long_prompt_is_a_failure_not_a_skip(serve: Any) -> None:
    url, _ = serve(max_model_len=2048)
    report = run_checks(LongctxRun(url))
    assert not report.ok and report.exit_code == 1
    for res in report.results:
        assert res.skipped is None and not res.ok, res.name
    assert "HTTP 400" in report.result("causality").error
    assert "maximum context length is 2048" in report.result("rescore").error
    # the short resumes still work; only those that cross 2,048 fail
    assert _by_case(report, "resume") == {
        "warm 1024 + 37": True,
        "warm 2048 + 37": False,
        "warm 3072 + 37": False,
        "warm 4096 + 37": False,
    }


def test_a_server_error_on_long_prompts_is_a_failure(serve: Any) -> None:
    url, _ = serve(crash_past=3000)
    report = run_checks(LongctxRun(url, checks=["causality", "resume"]))
    assert _by_case(report, "causality") == {"N=1000 of 4096": False, "N=2048 of 4096": False, "N=3000 of 4096": False}
    assert _by_case(report, "resume")["warm 3072 + 37"] is False
    assert _by_case(report, "resume")["warm 2048 + 37"] is True
    assert "HTTP 500" in report.result("causality").error and "EngineCore" in report.result("causality").error


def test_causality_catches_a_future_token_leak(serve: Any) -> None:
    url, _ = serve(causal_leak=True)
    report = run_checks(LongctxRun(url, checks=["causality", "rescore"]))
    assert not report.result("causality").ok
    # prompts of <= 2,048 tokens are clean; the 4,096-token prompt leaks its last token backwards
    assert _by_case(report, "causality") == {"N=1000 of 4096": False, "N=2048 of 4096": False, "N=3000 of 4096": False}


def test_resume_catches_a_stale_cache_hit_past_2048(serve: Any) -> None:
    url, _ = serve(stale_cache=True)
    report = run_checks(LongctxRun(url, checks=["resume", "cached", "rescore", "causality"]))
    assert _by_case(report, "resume") == {
        "warm 1024 + 37": True,
        "warm 2048 + 37": True,
        "warm 3072 + 37": False,
        "warm 4096 + 37": False,
    }
    assert report.result("cached").ok and report.result("rescore").ok and report.result("causality").ok


def test_rescore_catches_decode_drift_past_2048(serve: Any) -> None:
    url, _ = serve(decode_drift=True)
    report = run_checks(LongctxRun(url))
    assert [r.name for r in report.results if not r.ok] == ["rescore"]
    details = report.result("rescore").measurements[0].details
    assert details["max_before_boundary"] == 0.0
    assert details["max_past_boundary"] == pytest.approx(0.02, abs=1e-9)


def test_cached_tokens_against_the_recorded_baseline(serve: Any) -> None:
    url, _ = serve(cache_off=True)
    report = run_checks(LongctxRun(url, checks=["cached"]))
    values = [m.value for m in report.result("cached").measurements]
    assert values == [0, 0, 0, 0] and not report.ok
    url2, _ = serve(report_cached=False)
    report2 = run_checks(LongctxRun(url2, checks=["cached"]))
    assert not report2.ok
    assert "--enable-prompt-tokens-details" in report2.result("cached").error


def test_cached_against_the_production_spark_baseline(serve: Any) -> None:
    prod = BASELINE_DIR / "production-spark.json"
    url, _ = serve(block_size=2304, max_model_len=32768)
    ok = run_checks(LongctxRun(url, checks=["cached"], baseline=prod))
    assert ok.ok, ok.to_json()
    assert [m.value for m in ok.result("cached").measurements] == [18432, 18432, 18432, 16128, 16128, 18432]
    url2, _ = serve(block_size=128, max_model_len=32768)  # a different block size misses the baseline
    bad = run_checks(LongctxRun(url2, checks=["cached"], baseline=prod))
    assert not bad.ok


def test_control_mode_tolerates_noise_that_fixed_mode_does_not(serve: Any) -> None:
    url, _ = serve(noise=0.01)
    fixed = run_checks(LongctxRun(url, checks=["causality", "resume"], mode="fixed"))
    assert not fixed.ok
    url2, _ = serve(noise=0.01)
    control = run_checks(LongctxRun(url2, checks=["causality", "resume", "rescore"], mode="control"))
    assert control.ok, control.to_json()
    for res in control.results:
        for m in res.measurements:
            assert m.control is not None and m.control > 0
            assert m.bar == pytest.approx(2 * max(x.control for x in res.measurements))
    # noise does not hide a real fault: the stale hit is far above 2x the control
    url3, _ = serve(noise=0.01, stale_cache=True)
    broken = run_checks(LongctxRun(url3, checks=["resume"], mode="control"))
    assert _by_case(broken, "resume")["warm 4096 + 37"] is False


def test_copy_probe(serve: Any) -> None:
    url, _ = serve(induction=True)
    good = run_checks(LongctxRun(url, checks=["copy"]))
    m = good.result("copy").measurements[0]
    assert good.ok and m.details["nll_second_copy"] < 0.5 < 5.0 < m.details["nll_first_copy"]
    url2, _ = serve(induction=True, window=2048)  # a 2,048-token window cannot see the first copy
    bad = run_checks(LongctxRun(url2, checks=["copy"]))
    assert not bad.ok and bad.result("copy").measurements[0].value > 0.5


def test_report_json_and_table(serve: Any) -> None:
    url, _ = serve()
    report = run_checks(
        LongctxRun(
            url,
            checks=["causality", "rescore"],
            lengths={"total": 3000, "causal": [1500, 2500], "rescore_prompt": 2020, "rescore_reply": 40},
        )
    )
    data = json.loads(report.to_json())
    assert data["ok"] is True and data["lengths"]["causal"] == [1500, 2500]
    assert data["checks"][0]["measurements"][0]["details"]["binned_max"]
    buf = io.StringIO()
    render_longctx(Term(buf, tty=True, width=160, color=False), report)
    text = buf.getvalue()
    assert "causality" in text and "N=2500 of 3000" in text and "PASS" in text
    assert "control" not in text.splitlines()[1]  # fixed mode measures no control: no column for it
    assert [ln.split("\t")[:2] for ln in longctx_text(report).splitlines()[1:4]] == [
        ["check", "case"],
        ["causality", "N=1500 of 3000"],
        ["causality", "N=2500 of 3000"],
    ]


def test_unreachable_server_and_bad_input(serve: Any) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ServerUnreachable) as exc:
        run_checks(LongctxRun(f"http://127.0.0.1:{port}"))
    assert exc.value.exit_code == 2
    url, _ = serve()
    with pytest.raises(NotCompletionsServer) as not_api:  # answers, but not as a completions server
        run_checks(LongctxRun(url + "/nothing-here"))
    assert not_api.value.exit_code == 2
    with pytest.raises(InputError, match="unknown check"):
        run_checks(LongctxRun(url, checks=["causality", "vibes"]))
    with pytest.raises(InputError, match="reference_model"):
        run_checks(LongctxRun(url, checks=["reference"]))
    with pytest.raises(InputError, match="http://"):
        CompletionsClient("127.0.0.1:8000")
