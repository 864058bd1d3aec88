"""Unit tests of the long-context checks: threshold logic, report, and every check against a local
HTTP server on 127.0.0.1 that speaks vLLM's completions schema.

The server here is a test double (``CompletionsDouble``). It follows vLLM 0.30.0's wire format:
token-id prompts, ``prompt_logprobs`` as a list whose first entry is null and whose entries map
token-id strings to ``{"logprob", "rank", "decoded_token"}``, ``logprobs`` with ``tokens`` /
``token_logprobs`` / ``top_logprobs`` named ``token_id:N`` when ``return_tokens_as_token_ids`` is set,
``usage.prompt_tokens_details.cached_tokens``, prefix caching in whole blocks keyed by ``cache_salt``
(at most prompt length - 1, never read by requests that ask for ``prompt_logprobs``), and HTTP 400
with vLLM's error body when prompt + max_tokens exceeds ``max_model_len``.
Where it differs from vLLM:
  * the "model" is a bigram table plus a position term (and, optionally, an exact induction rule
    that copies what followed the previous occurrence of the current two tokens, within ``window``),
    computed in float64 numpy, not a transformer;
  * its prefix cache never evicts and stores prompt blocks only;
  * requests are served one at a time (no batching, so no batch-shape numerics);
  * faults are injected by flags on the double, not by breaking attention kernels;
  * it ignores sampling parameters other than greedy (temperature must be 0).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from patchset.errors import InputError
from patchset.verify.longctx import (
    BASELINE_DIR,
    Lengths,
    LongctxReport,
    Thresholds,
    load_baseline,
    max_abs_diff,
    run_checks,
    topk_drift,
)
from patchset.verify.openai_client import CompletionsClient, NotCompletionsServer, ServerUnreachable, parse_completion

VOCAB = 1024
BOUNDARY = 2048


class CompletionsDouble:
    """A deterministic completions 'model' with switchable long-context faults."""

    def __init__(
        self,
        *,
        max_model_len: int = 8192,
        block_size: int = 128,
        report_cached: bool = True,
        causal_leak: bool = False,
        stale_cache: bool = False,
        decode_drift: bool = False,
        cache_off: bool = False,
        noise: float = 0.0,
        induction: bool = False,
        window: int | None = None,
        crash_past: int | None = None,
    ) -> None:
        rng = np.random.default_rng(1234)
        self.a = rng.normal(0, 1.0, (VOCAB, VOCAB))
        self.b = rng.normal(0, 0.5, (VOCAB, VOCAB))
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.report_cached = report_cached
        self.causal_leak = causal_leak
        self.stale_cache = stale_cache
        self.decode_drift = decode_drift
        self.cache_off = cache_off
        self.noise = noise
        self.noise_rng = np.random.default_rng(99)
        self.induction = induction
        self.window = window
        self.crash_past = crash_past
        self.cache: dict[str, set[tuple[int, ...]]] = {}
        self.lock = threading.Lock()
        self.requests = 0

    # -- the model
    def logits(self, toks: list[int], positions: range, leak_from: list[int] | None = None) -> np.ndarray:
        """Logits predicting token p+1 from tokens[..p], for each p in positions."""
        idx = np.array([toks[p] for p in positions])
        prev = np.array([toks[p - 1] if p > 0 else 0 for p in positions])
        pos = np.array(list(positions), dtype=float)
        out = self.a[idx] + self.b[prev]
        # + 0.3 sin(pos/300 + v/40), as two outer products (much cheaper than a sin per entry)
        v = np.arange(VOCAB) / 40.0
        out += np.outer(0.3 * np.sin(pos / 300.0), np.cos(v))
        out += np.outer(0.3 * np.cos(pos / 300.0), np.sin(v))
        if self.induction:
            last: dict[tuple[int, int], int] = {}  # (previous token, token) -> last position seen
            for p in range(1, positions.stop):
                key = (toks[p - 1], toks[p])
                if p in positions and key in last and p - last[key] <= (self.window or 10**9):
                    out[p - positions.start, toks[last[key] + 1]] += 30.0
                last[key] = p
        if leak_from is not None:  # a causality bug: every position sees the prompt's last token
            out[:, leak_from[-1]] += 0.5
        return out

    @staticmethod
    def log_softmax(x: np.ndarray) -> np.ndarray:
        m = x.max(axis=-1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))

    def _noisy(self, v: float) -> float:
        return float(v + (self.noise_rng.normal(0, self.noise) if self.noise else 0.0))

    def complete(self, req: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        prompt = req.get("prompt")
        if not isinstance(prompt, list) or not prompt or not all(isinstance(t, int) for t in prompt):
            return 400, {
                "error": {
                    "message": "prompt must be a list of token ids",
                    "type": "BadRequestError",
                    "param": "prompt",
                    "code": 400,
                }
            }
        max_tokens = int(req.get("max_tokens", 16))
        n = len(prompt)
        if n + max_tokens > self.max_model_len:
            return 400, {
                "error": {
                    "message": (
                        f"This model's maximum context length is {self.max_model_len} tokens. However, you "
                        f"requested {max_tokens} output tokens and your prompt contains {n} input tokens, "
                        f"for a total of {n + max_tokens} tokens."
                    ),
                    "type": "BadRequestError",
                    "param": "input_tokens",
                    "code": 400,
                }
            }
        if self.crash_past is not None and n > self.crash_past:  # what vLLM answers once its EngineCore died
            return 500, {
                "error": {
                    "message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                }
            }
        if any(t < 0 or t >= VOCAB for t in prompt):
            return 400, {
                "error": {
                    "message": "Token id out of vocabulary",
                    "type": "BadRequestError",
                    "param": "prompt",
                    "code": 400,
                }
            }
        by_id = bool(req.get("return_tokens_as_token_ids"))
        name = (lambda t: f"token_id:{t}") if by_id else (lambda t: f"w{t}")
        salt = str(req.get("cache_salt") or "")
        wants_prompt_lp = req.get("prompt_logprobs") is not None
        blocks = self.cache.setdefault(salt, set())
        bs = self.block_size
        cached = 0
        if not wants_prompt_lp and not self.cache_off:
            k = (n - 1) // bs
            while k > 0 and tuple(prompt[: k * bs]) not in blocks:
                k -= 1
            cached = k * bs
        for k in range(1, n // bs + 1):
            blocks.add(tuple(prompt[: k * bs]))
        leak = prompt if (self.causal_leak and n > BOUNDARY) else None

        choice: dict[str, Any] = {"index": 0, "finish_reason": "length", "stop_reason": None}
        if wants_prompt_lp:
            lp = self.log_softmax(self.logits(prompt, range(0, n - 1), leak))
            k = int(req["prompt_logprobs"])
            actual = np.array(prompt[1:])
            actual_lp = lp[np.arange(n - 1), actual]
            ranks = (lp > actual_lp[:, None]).sum(axis=1) + 1
            top = np.argpartition(-lp, k - 1, axis=1)[:, :k] if k > 0 else np.zeros((n - 1, 0), dtype=int)
            entries: list[Any] = [None]
            for p in range(1, n):
                tok = prompt[p]
                entry = {
                    str(tok): {
                        "logprob": self._noisy(actual_lp[p - 1]),
                        "rank": int(ranks[p - 1]),
                        "decoded_token": f"w{tok}",
                    }
                }
                for alt in top[p - 1]:
                    entry.setdefault(
                        str(int(alt)), {"logprob": self._noisy(lp[p - 1, alt]), "rank": 1, "decoded_token": f"w{alt}"}
                    )
                entries.append(entry)
            choice["prompt_logprobs"] = entries
        toks = list(prompt)
        out_tokens: list[int] = []
        out_lps: list[float] = []
        tops: list[dict[str, float]] = []
        for step in range(max_tokens):
            pos = len(toks) - 1
            row = self.log_softmax(self.logits(toks, range(pos, pos + 1), leak))[0]
            if self.stale_cache and cached > BOUNDARY:
                row = row + 0.3 * np.cos(np.arange(VOCAB))
            tok = int(np.argmax(row))
            val = float(row[tok])
            if self.decode_drift and step > 0 and pos >= BOUNDARY:
                val += 0.02
            out_tokens.append(tok)
            out_lps.append(self._noisy(val))
            if req.get("logprobs") is not None:
                top = {}
                for alt in np.argsort(-row)[: int(req["logprobs"])]:
                    top[name(int(alt))] = self._noisy(float(row[alt]))
                tops.append(top)
            toks.append(tok)
        if req.get("logprobs") is not None:
            choice["logprobs"] = {
                "text_offset": list(range(len(out_tokens))),
                "token_logprobs": out_lps,
                "tokens": [name(t) for t in out_tokens],
                "top_logprobs": tops,
            }
        else:
            choice["logprobs"] = None
        choice["text"] = " ".join(f"w{t}" for t in out_tokens)
        details = {"cached_tokens": cached} if self.report_cached else None
        return 200, {
            "id": f"cmpl-{self.requests}",
            "object": "text_completion",
            "model": "double",
            "choices": [choice],
            "usage": {
                "prompt_tokens": n,
                "completion_tokens": len(out_tokens),
                "total_tokens": n + len(out_tokens),
                "prompt_tokens_details": details,
            },
        }


def _handler(double: CompletionsDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": "double",
                                "object": "model",
                                "owned_by": "test",
                                "max_model_len": double.max_model_len,
                            }
                        ],
                    },
                )
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self._send(404, {"detail": "Not Found"})
                return
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with double.lock:
                double.requests += 1
                status, body = double.complete(req)
            self._send(status, body)

    return Handler


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(**kwargs: Any) -> tuple[str, CompletionsDouble]:
        double = CompletionsDouble(**kwargs)
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(double))
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}", double

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


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
    from patchset.verify.openai_client import BadResponse

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
    report = run_checks(url, mode="fixed")
    assert report.ok, report.to_json()
    assert report.exit_code == 0
    assert [r.name for r in report.results] == ["causality", "resume", "cached", "rescore"]
    data = json.loads(report.to_json())
    resume = data["checks"][1]["measurements"]
    assert [m["details"]["cached_tokens"] for m in resume] == [1024, 2048, 3072, 4096]
    assert data["checks"][3]["measurements"][0]["details"]["max_past_boundary"] == 0.0


def test_http_400_on_a_long_prompt_is_a_failure_not_a_skip(serve: Any) -> None:
    url, _ = serve(max_model_len=2048)
    report = run_checks(url)
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
    report = run_checks(url, checks=["causality", "resume"])
    assert _by_case(report, "causality") == {"N=1000 of 4096": False, "N=2048 of 4096": False, "N=3000 of 4096": False}
    assert _by_case(report, "resume")["warm 3072 + 37"] is False
    assert _by_case(report, "resume")["warm 2048 + 37"] is True
    assert "HTTP 500" in report.result("causality").error and "EngineCore" in report.result("causality").error


def test_causality_catches_a_future_token_leak(serve: Any) -> None:
    url, _ = serve(causal_leak=True)
    report = run_checks(url, checks=["causality", "rescore"])
    assert not report.result("causality").ok
    # prompts of <= 2,048 tokens are clean; the 4,096-token prompt leaks its last token backwards
    assert _by_case(report, "causality") == {"N=1000 of 4096": False, "N=2048 of 4096": False, "N=3000 of 4096": False}


def test_resume_catches_a_stale_cache_hit_past_2048(serve: Any) -> None:
    url, _ = serve(stale_cache=True)
    report = run_checks(url, checks=["resume", "cached", "rescore", "causality"])
    assert _by_case(report, "resume") == {
        "warm 1024 + 37": True,
        "warm 2048 + 37": True,
        "warm 3072 + 37": False,
        "warm 4096 + 37": False,
    }
    assert report.result("cached").ok and report.result("rescore").ok and report.result("causality").ok


def test_rescore_catches_decode_drift_past_2048(serve: Any) -> None:
    url, _ = serve(decode_drift=True)
    report = run_checks(url)
    assert [r.name for r in report.results if not r.ok] == ["rescore"]
    details = report.result("rescore").measurements[0].details
    assert details["max_before_boundary"] == 0.0
    assert details["max_past_boundary"] == pytest.approx(0.02, abs=1e-9)


def test_cached_tokens_against_the_recorded_baseline(serve: Any) -> None:
    url, _ = serve(cache_off=True)
    report = run_checks(url, checks=["cached"])
    values = [m.value for m in report.result("cached").measurements]
    assert values == [0, 0, 0, 0] and not report.ok
    url2, _ = serve(report_cached=False)
    report2 = run_checks(url2, checks=["cached"])
    assert not report2.ok
    assert "--enable-prompt-tokens-details" in report2.result("cached").error


def test_cached_against_the_production_spark_baseline(serve: Any) -> None:
    prod = BASELINE_DIR / "production-spark.json"
    url, _ = serve(block_size=2304, max_model_len=32768)
    ok = run_checks(url, checks=["cached"], baseline=prod)
    assert ok.ok, ok.to_json()
    assert [m.value for m in ok.result("cached").measurements] == [18432, 18432, 18432, 16128, 16128, 18432]
    url2, _ = serve(block_size=128, max_model_len=32768)  # a different block size misses the baseline
    bad = run_checks(url2, checks=["cached"], baseline=prod)
    assert not bad.ok


def test_control_mode_tolerates_noise_that_fixed_mode_does_not(serve: Any) -> None:
    url, _ = serve(noise=0.01)
    fixed = run_checks(url, checks=["causality", "resume"], mode="fixed")
    assert not fixed.ok
    url2, _ = serve(noise=0.01)
    control = run_checks(url2, checks=["causality", "resume", "rescore"], mode="control")
    assert control.ok, control.to_json()
    for res in control.results:
        for m in res.measurements:
            assert m.control is not None and m.control > 0
            assert m.bar == pytest.approx(2 * max(x.control for x in res.measurements))
    # noise does not hide a real fault: the stale hit is far above 2x the control
    url3, _ = serve(noise=0.01, stale_cache=True)
    broken = run_checks(url3, checks=["resume"], mode="control")
    assert _by_case(broken, "resume")["warm 4096 + 37"] is False


def test_copy_probe(serve: Any) -> None:
    url, _ = serve(induction=True)
    good = run_checks(url, checks=["copy"])
    m = good.result("copy").measurements[0]
    assert good.ok and m.details["nll_second_copy"] < 0.5 < 5.0 < m.details["nll_first_copy"]
    url2, _ = serve(induction=True, window=2048)  # a 2,048-token window cannot see the first copy
    bad = run_checks(url2, checks=["copy"])
    assert not bad.ok and bad.result("copy").measurements[0].value > 0.5


def test_report_json_and_table(serve: Any) -> None:
    from rich.console import Console

    url, _ = serve()
    report = run_checks(
        url,
        checks=["causality", "rescore"],
        lengths={"total": 3000, "causal": [1500, 2500], "rescore_prompt": 2020, "rescore_reply": 40},
    )
    data = json.loads(report.to_json())
    assert data["ok"] is True and data["lengths"]["causal"] == [1500, 2500]
    assert data["checks"][0]["measurements"][0]["details"]["binned_max"]
    console = Console(record=True, width=160)
    report.render(console)
    text = console.export_text()
    assert "causality" in text and "N=2500 of 3000" in text and "PASS" in text


def test_unreachable_server_and_bad_input(serve: Any) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ServerUnreachable) as exc:
        run_checks(f"http://127.0.0.1:{port}")
    assert exc.value.exit_code == 2
    url, _ = serve()
    with pytest.raises(NotCompletionsServer) as not_api:  # answers, but not as a completions server
        run_checks(url + "/nothing-here")
    assert not_api.value.exit_code == 2
    with pytest.raises(InputError, match="unknown check"):
        run_checks(url, checks=["causality", "vibes"])
    with pytest.raises(InputError, match="reference_model"):
        run_checks(url, checks=["reference"])
    with pytest.raises(InputError, match="http://"):
        CompletionsClient("127.0.0.1:8000")
