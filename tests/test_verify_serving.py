"""Serving tests (``kind = "serving"``) and engines from the ledger, end to end on a real HTTP server.

The engine is the completions double (``tests.support.completions_double``) started by launcher
scripts from each build tree (``tests.support.serving_world``): patches to ``fakeengine/*.py`` in the
tree slow its decoding or break its prefix cache, as patches to vLLM do to a real engine. What is
tested is verify's part: engines from ``[engines.*]`` (foreground, detached with stop and logs, the
docker preset with its overlay, a launcher that fails), one engine per tree, paired measurement,
verdicts with intervals, the result cache, ``--only``, ``--engine``, ``--baseline`` /
``--save-baseline``, and foreign traffic. The real vLLM engine: ``tests/test_verify_serving_engine.py``.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from io import StringIO
from pathlib import Path

import pytest

from patchset.commands.table import Term
from patchset.errors import InputError
from patchset.verify.engines.client import CompletionsClient
from patchset.verify.engines.launch import process_group_alive
from patchset.verify.outcomes import BROKEN, ERROR, NOT_NEEDED, PROVEN
from patchset.verify.pertest import VerifyRun, run_verify
from patchset.verify.pertest_view import render_verify
from patchset.verify.serving import (
    Meter,
    ServingConfig,
    compare,
    load_serving_baseline,
    measure_alone,
    parse_metrics,
)
from tests.support import serving_world
from tests.support.completions_double import serving


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))


def _classes(report) -> dict[str, str]:
    return {p.patch_id: p.klass for p in report.patches}


def _view(report, width: int = 100) -> str:
    out = StringIO()
    render_verify(Term(out, tty=True, width=width, color=False), report)
    return out.getvalue()


# --------------------------------------------------------------------------- the checks, in process


def test_meter_measures_every_check_against_the_double() -> None:
    cfg = ServingConfig(
        checks=["decode", "concurrent", "ttft-resume", "cache-hits", "spec-accept"], repeats=3, streams=2, max_tokens=8
    )
    with serving(token_delay=0.001, prefill_delay=0.00005, spec_accept=0.5) as (url, _):
        s = measure_alone(Meter(url, cfg), cfg, "one")
    assert s.repeats == 3 and s.has_metrics and not s.foreign and not s.skipped
    names = set(s.metrics)
    assert {"decode tok/s (prompt 32)", "decode tok/s (prompt 2048)", "concurrent tok/s (2 streams)"} <= names
    assert all(v is not None and v > 0 for v in s.values["decode tok/s (prompt 512)"])
    # cold prefill of 4,096 tokens costs the double 0.2 s; the resumed session reads its cache
    resumed, cold = s.values["ttft resumed s (4096 tokens)"], s.values["ttft cold s (4096 tokens)"]
    assert all(r is not None and c is not None for r, c in zip(resumed, cold, strict=True))
    assert statistics.median(resumed) < statistics.median(cold)  # one repeat may be disturbed on a loaded machine
    assert s.metrics["ttft resumed s (4096 tokens)"].better == "lower"
    # usage and /metrics agree on the agent session's hits; the double's acceptance comes back
    assert s.values["cache hits % (usage)"] == s.values["cache hits % (/metrics)"]
    assert 60 < s.values["cache hits % (usage)"][0] < 95
    assert s.values["spec acceptance %"] == [50.0] * 3 and s.values["spec mean accepted length"] == [2.0] * 3


def test_spec_accept_is_skipped_without_counters() -> None:
    cfg = ServingConfig(checks=["decode", "spec-accept"], repeats=3, max_tokens=4)
    with serving() as (url, _):
        s = measure_alone(Meter(url, cfg), cfg, "one")
    assert "no speculative-decoding drafts" in s.skipped["spec-accept"]
    with serving(metrics=False) as (url, _):
        s = measure_alone(Meter(url, cfg), cfg, "two")
    assert not s.has_metrics and "no /metrics" in s.skipped["spec-accept"]


def test_foreign_traffic_is_detected_and_left_out() -> None:
    """Requests the check did not send move vllm:request_success: those repeats carry no verdict."""
    cfg = ServingConfig(checks=["decode"], repeats=3, max_tokens=8)
    with serving(token_delay=0.002) as (url, _):
        clean = measure_alone(Meter(url, cfg), cfg, "clean")
        stop = threading.Event()

        def neighbour() -> None:
            c = CompletionsClient(url, timeout=30)
            while not stop.is_set():
                c.complete([5, 6, 7], max_tokens=3)
                time.sleep(0.001)

        # several neighbours, so every repeat overlaps foreign requests even on a loaded machine
        threads = [threading.Thread(target=neighbour, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.2)  # the neighbours are sending before the first repeat starts
        try:
            busy = measure_alone(Meter(url, cfg), cfg, "busy")
        finally:
            stop.set()
            for t in threads:
                t.join(10)
    assert not clean.foreign
    assert len(busy.foreign) == 3 and all("this check sent 3" in f["why"] for f in busy.foreign)
    assert busy.clean("decode tok/s (prompt 32)") == []
    comp = compare(busy, clean, cfg)
    assert comp.verdicts == []
    assert any("foreign traffic on the candidate in repeat 1 (decode)" in n for n in comp.notes)
    assert any("no verdict" in n for n in comp.notes)


def test_parse_metrics_sums_label_sets() -> None:
    text = (
        "# HELP vllm:request_success_total Count\n# TYPE vllm:request_success_total counter\n"
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 12.0\n'
        'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 3.0\n'
        "vllm:prefix_cache_hits_total 2.5e3\nnot a sample\n"
    )
    values = parse_metrics(text)
    assert values["vllm:request_success_total"] == 15.0 and values["vllm:prefix_cache_hits_total"] == 2500.0


# --------------------------------------------------------------------------- verify, through launchers


def test_serving_verify_through_a_launcher_then_from_the_cache(tmp_path: Path) -> None:
    path, base = serving_world.write_world(tmp_path)
    logs = tmp_path / "logs"
    report = run_verify(VerifyRun(path, tree=base, jobs=2, log_dir=logs))
    assert _classes(report) == {"s1-slow-decode": BROKEN, "s2-cache-miss": BROKEN, "s3-banner": NOT_NEEDED}
    assert report.engine_starts == 4 and not report.reused
    slow = report.patches[0].tests[0]
    comp = slow.with_run.comparison
    assert comp["paired"] is True and slow.with_run.baseline_from == "the tree without s1-slow-decode"
    decode = {v["metric"]: v for v in comp["verdicts"]}
    assert decode["decode tok/s (prompt 32)"]["verdict"] == "regression"
    assert decode["decode tok/s (prompt 32)"]["high"] < 0.85  # 4x the time per token
    assert "regression: decode tok/s (prompt 32) 0." in slow.with_run.reason and "] " not in slow.with_run.reason[:30]
    miss = report.patches[1].tests[0].with_run.comparison["verdicts"]
    assert {v["metric"]: v["verdict"] for v in miss} == {
        "cache hits % (usage)": "regression",
        "cache hits % (/metrics)": "regression",
    }
    harmless = report.patches[2].tests[0]
    assert {v["verdict"] for v in harmless.with_run.comparison["verdicts"]} == {"within noise"}
    # the JSON carries every sample of both sides
    data = json.loads(json.dumps(report.to_json()))
    t = data["patches"][0]["tests"][0]
    assert t["kind"] == "serving" and t["engine"] == "double"
    samples = t["with"]["samples"]["metrics"]["decode tok/s (prompt 32)"]["samples"]
    assert len(samples) == 6 and len(t["without"]["samples"]["metrics"]["decode tok/s (prompt 32)"]["samples"]) == 6
    assert t["with"]["comparison"]["verdicts"][0]["candidate"] == samples
    view = _view(report)
    assert "regression decode tok/s (prompt 32): ratio " in view and "[95% CI " in view
    assert "paired, interleaved repeats" in view and "4 engine start(s)" in view
    for e in report.engines:  # every engine came from the launcher and ran the tree's code
        assert e.engine == "double" and e.started and Path(e.log).is_file()
        assert "launch.sh" in Path(e.log).read_text().splitlines()[0]

    again = run_verify(VerifyRun(path, tree=base, jobs=2, log_dir=logs))
    assert _classes(again) == _classes(report)
    assert again.engine_starts == 0 and len(again.reused) == 6
    assert not any(e.started for e in again.engines)
    shown = _view(again)  # (with a plan, the line also says what it planned)
    assert "  0 engine start(s)" in shown and "; 6 result(s) reused from the cache" in shown
    same = again.patches[0].tests[0].with_run.comparison
    assert same["paired"] is True and same["verdicts"][0]["candidate"] == samples

    # one patch more: every tree with it changed; the tree without it is the old series (reused)
    grown, _ = serving_world.write_world(tmp_path, patches=[*serving_world.PATCHES, serving_world.EXTRA])
    assert grown == path
    third = run_verify(VerifyRun(path, tree=base, jobs=2, log_dir=logs))
    assert third.engine_starts == 4 and third.reused == ["s4-docstring/serve (without)"]
    new = next(p for p in third.patches if p.patch_id == "s4-docstring").tests[0]
    assert new.with_run.comparison["paired"] is False  # one side from the cache: not interleaved
    assert "without s4-docstring on double: not started, every result reused from the cache" in " ".join(
        _view(third, 200).split()
    )


def test_an_edited_launcher_is_another_engine_for_the_result_cache(tmp_path: Path) -> None:
    """The cache's engine key holds the content of the scripts the engine's commands name beside the
    ledger: a launcher that now passes other flags measures afresh, not the old launcher's figures."""
    path, base = serving_world.write_world(tmp_path, patches=serving_world.PATCHES[2:])
    first = run_verify(VerifyRun(path, tree=base, log_dir=tmp_path / "logs"))
    assert first.engine_starts == 2 and not first.reused
    again = run_verify(VerifyRun(path, tree=base, log_dir=tmp_path / "logs"))
    assert again.engine_starts == 0 and len(again.reused) == 2
    launcher = path.parent / "launch.sh"
    launcher.write_text(launcher.read_text() + "# now with --max-num-seqs 4\n")
    edited = run_verify(VerifyRun(path, tree=base, log_dir=tmp_path / "logs"))
    assert edited.engine_starts == 2 and not edited.reused


def test_stored_baseline_only_and_engine_override(tmp_path: Path) -> None:
    path, base = serving_world.write_world(tmp_path)
    saved = tmp_path / "serving-baseline.json"
    first = run_verify(VerifyRun(path, tree=base, only=["s3-banner"], save_baseline=saved, use_cache=False))
    assert [p.patch_id for p in first.patches] == ["s3-banner"] and first.engine_starts == 2
    stored = load_serving_baseline(saved)
    assert list(stored) == ["s3-banner/serve"] and stored["s3-banner/serve"].repeats == 6
    # against the stored figures: only the tree with the series starts, on the engine asked for
    second = run_verify(
        VerifyRun(path, tree=base, only=["s3-banner"], baseline=saved, engine="single", use_cache=False)
    )
    t = second.patches[0].tests[0]
    assert second.engine_starts == 1 and t.engine == "single" and second.engines[0].engine == "single"
    assert t.with_run.baseline_from == "the stored baseline" and t.with_run.comparison["paired"] is False
    assert t.without_run.outcome == "pass" and t.klass == NOT_NEEDED
    # a test the stored figures do not cover is compared with the tree without its patch, and says so
    third = run_verify(VerifyRun(path, tree=base, only=["s1-slow-decode"], baseline=saved, use_cache=False))
    assert third.engine_starts == 2 and third.patches[0].klass == BROKEN
    assert any("has no figures for s1-slow-decode/serve" in n for n in third.notes)
    with pytest.raises(InputError, match="unknown engine 'nope'"):
        run_verify(VerifyRun(path, tree=base, engine="nope"))
    with pytest.raises(InputError, match="no patch with id 's9'"):
        run_verify(VerifyRun(path, tree=base, only=["s9"]))
    saved.write_text('{"format": "something else"}')
    with pytest.raises(InputError, match="not a serving baseline"):
        run_verify(VerifyRun(path, tree=base, baseline=saved))


def test_a_launcher_that_fails_is_an_error_with_its_log(tmp_path: Path) -> None:
    path, base = serving_world.write_world(tmp_path, patches=serving_world.PATCHES[2:], engine="broken")
    report = run_verify(VerifyRun(path, tree=base, log_dir=tmp_path / "logs"))
    (po,) = report.patches
    t = po.tests[0]
    assert po.klass == ERROR and report.exit_code == 2
    assert t.with_run.outcome == "error" and "exited with code 3 during start-up" in t.with_run.reason
    assert "node spark-3 does not answer" in t.with_run.output  # the tail of its log
    assert all(e.error for e in report.engines)


def test_an_engine_that_dies_mid_check_is_an_error_with_its_log(tmp_path: Path) -> None:
    """Up and ready, then gone during the measurement (its EngineCore died at the 5th request):
    every test it served is an error with the tail of its log, never a pass or a fail, and nothing
    of it is kept in the result cache (a re-run starts the engines again)."""
    path, base = serving_world.write_world(tmp_path, patches=serving_world.PATCHES[2:], engine="dying")
    launcher = path.parent / "launch-dying.sh"
    launcher.write_text(serving_world.LAUNCH.replace("--faults-from", "--flag die_after=4 --faults-from"))
    launcher.chmod(0o755)
    with path.open("a") as fh:
        fh.write('\n[engines.dying]\nstart = ["{ledger}/launch-dying.sh", "{tree}", "{port}"]\nready_timeout = 60\n')
    for attempt in (1, 2):
        report = run_verify(VerifyRun(path, tree=base, log_dir=tmp_path / f"logs{attempt}"))
        (po,) = report.patches
        t = po.tests[0]
        assert po.klass == ERROR and report.exit_code == 2, t.with_run.reason
        assert t.with_run.outcome == "error" and "the engine stopped answering" in t.with_run.reason
        assert "EngineCore died at request 5" in t.with_run.output  # the tail of its log
        assert report.engine_starts == 2 and not report.reused  # started, and the error not cached
        assert all(e.started for e in report.engines)


def test_a_detached_launcher_is_stopped_and_its_logs_gathered(tmp_path: Path) -> None:
    path, base = serving_world.write_world(tmp_path, patches=serving_world.PATCHES[2:], engine="detached")
    logs = tmp_path / "logs"
    report = run_verify(VerifyRun(path, tree=base, log_dir=logs))
    assert _classes(report) == {"s3-banner": NOT_NEEDED}
    for e in report.engines:
        logdir = Path(e.log).with_suffix("")
        assert (logdir / "stopped").read_text() == "stopped\n"  # the stop command ran
        assert "serving on 127.0.0.1" in (logdir / "logs.txt").read_text()  # the logs command ran
        pid = int((logdir / "server.pid").read_text())
        deadline = time.monotonic() + 10
        while process_group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_docker_preset_mounts_the_overlay_of_each_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """delivers = "overlay": each tree's patched files, laid out under the install root, bind-mounted
    read-only over the image: the slow patch slows the container that has it, and only that one."""
    path, base = serving_world.write_world(tmp_path, patches=serving_world.PATCHES[:1], engine="box")
    for key, value in serving_world.fake_docker(tmp_path, base).items():
        monkeypatch.setenv(key, value)
    report = run_verify(VerifyRun(path, tree=base, log_dir=tmp_path / "logs"))
    assert _classes(report) == {"s1-slow-decode": BROKEN}
    state = tmp_path / "docker-state"
    calls = (state / "calls").read_text().splitlines()
    runs = [c for c in calls if c.startswith("run ")]
    assert len(runs) == 2 and sum(c.startswith("rm -f patchset-box-") for c in calls) == 2
    assert sum(c.startswith("logs patchset-box-") for c in calls) == 2
    mounts = {p.name: p.read_text().split() for p in state.glob("*.mounts")}
    with_tree = next(v for k, v in mounts.items() if "with_the_series" in k)
    without = next(v for k, v in mounts.items() if "without" in k)
    assert len(with_tree) == 1 and with_tree[0].endswith(f":{serving_world.ROOT}/fakeengine/speed.py:ro")
    assert without == []  # the series minus its only patch: the stock image
    assert "fake/engine:1" in runs[0] and "--port" in runs[0]


def test_a_cluster_engine_measures_one_side_at_a_time(tmp_path: Path) -> None:
    """max_parallel = 1 (a cluster): never two engines at once, so the sides are measured apart."""
    path, base = serving_world.write_world(tmp_path, patches=serving_world.PATCHES[:1], engine="single")
    report = run_verify(VerifyRun(path, tree=base, jobs=2, log_dir=tmp_path / "logs"))
    t = report.patches[0].tests[0]
    assert t.with_run.comparison["paired"] is False and t.with_run.comparison["verdicts"]
    assert report.engine_starts == 2 and t.klass in (BROKEN, NOT_NEEDED)  # unpaired on a busy machine: noisier


def test_improvement_proves_a_speed_patch(tmp_path: Path) -> None:
    fast = [("f1-faster", "fakeengine/speed.py", "0.001", "0.0", ["decode"])]
    path, base = serving_world.write_world(tmp_path, patches=fast)
    report = run_verify(VerifyRun(path, tree=base, log_dir=tmp_path / "logs"))
    t = report.patches[0].tests[0]
    assert t.klass == PROVEN, t.note
    assert t.without_run.outcome == "fail" and "is worse" in t.without_run.reason


# --------------------------------------------------------------------------- a drift check repeated N times


class _At:
    """An engine that is already up (the in-process double): what run_one needs of one."""

    def __init__(self, url: str, log: Path) -> None:
        self.url, self.log_path, self.startup_seconds, self.vllm_origin = url, log, 0.0, None


def _resume_spec(trials: int):
    from patchset.verify.longctx.runs import LongctxSpec

    return LongctxSpec(["resume"], "m", "control", None, [], {}, 60, repeats=trials)


def test_repeated_resume_in_control_mode_is_judged_by_the_exact_test(tmp_path: Path) -> None:
    """Noise alone: the resumes exceed the bar no more often than the controls (noise, or more trials
    asked for); a stale cache hit past 2,048: a bug, however noisy."""
    from patchset.verify.longctx.runs import run_one

    with serving(noise=0.001) as (url, _):
        healthy = run_one(_At(url, tmp_path / "a.log"), _resume_spec(40), 0)
    assert healthy.drift is not None and healthy.drift["verdict"] in ("noise", "inconclusive")
    assert healthy.outcome == ("pass" if healthy.drift["verdict"] == "noise" else "error")
    # 40 repeats of the four resume cases: 160 resumes against 160 controls
    assert healthy.drift["repeats"] == 40 and healthy.drift["trials"] == healthy.drift["control_trials"] == 160
    if healthy.drift["verdict"] == "inconclusive":
        assert "more trials" in healthy.reason
    row = healthy.checks[-1]
    assert row["check"] == "resume" and len(row["trials"]["drifts"]) == 160
    with serving(noise=0.001, stale_cache=True) as (url, _):
        broken = run_one(_At(url, tmp_path / "b.log"), _resume_spec(10), 0)
    assert broken.outcome == "fail" and broken.drift["verdict"] == "bug"
    assert "resume over 10 trials: bug:" in broken.reason and "Fisher p" in broken.reason


def test_server_side_timings_are_preferred_to_the_clients_clock() -> None:
    """With vLLM's timing histograms on /metrics, decode tok/s and time to first token are the server's
    own figures for each request: a client starved of CPU cannot squeeze or stretch them."""
    cfg = ServingConfig(checks=["decode", "ttft-resume"], repeats=3, max_tokens=9)
    with serving(token_delay=0.004, prefill_delay=0.0001, metrics="timed") as (url, _):
        s = measure_alone(Meter(url, cfg), cfg, "timed")
    for shape in (32, 512, 2048):
        assert s.values[f"decode tok/s (prompt {shape})"] == [pytest.approx(250.0)] * 3  # 8 tokens in 8 x 4 ms
    resumed = s.values["ttft resumed s (4096 tokens)"]
    cold = s.values["ttft cold s (4096 tokens)"]
    assert cold == [pytest.approx(0.0001 * 4136 + 1e-4)] * 3  # every prompt token computed
    assert all(r is not None and r < 0.01 for r in resumed)  # 4,096 of them from the cache


# --------------------------------------------------------------------------- deadlines


def test_a_stream_that_trickles_is_cut_at_the_requests_deadline() -> None:
    """A server that sends a streamed completion one byte every 0.1 s never trips a read timeout;
    the request's own deadline (the check's timeout, here 1.5 s) ends it: an unreachable server,
    not a check that hangs for as long as the server likes. /metrics likewise."""
    from patchset.verify.engines.client import ServerUnreachable
    from tests.support.slowhttp import Reply, SlowServer

    chunk = b'data: {"choices": [{"text": "x", "logprobs": {"tokens": ["token_id:5"]}}]}\n\n'
    trickle = Reply(body=chunk * 40, content_type="text/event-stream", interval=0.1, fast=len(chunk))
    metrics = Reply(body=b"vllm:request_success_total 1\n" * 40, content_type="text/plain", interval=0.1)
    with SlowServer({"/v1/completions": trickle, "/metrics": metrics}) as srv:
        client = CompletionsClient(srv.url, "m", timeout=1.5)
        t0 = time.monotonic()
        with pytest.raises(ServerUnreachable, match=r"within 1.5 s"):
            client.stream([1, 2, 3], max_tokens=4)
        took = time.monotonic() - t0
        assert took < 6, took  # the whole body would take 320 s
        t0 = time.monotonic()
        assert client.metrics_text() is None  # no whole /metrics within the deadline: none
        assert time.monotonic() - t0 < 6
