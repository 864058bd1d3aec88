"""A local HTTP server that speaks vLLM 0.30.0's ``/v1/completions`` schema, with switchable faults.

Used by the long-context unit tests in-process (``CompletionsDouble`` + ``handler_for``) and by the
``verify`` plumbing test as a separate process started from a build tree
(``python -m tests.support.completions_double --port N --faults-from MODULE``: the fault flags are
read from ``MODULE.FAULTS`` imported from ``PYTHONPATH``, so a patch to that module in the tree
changes what the server does, as a patch to vLLM changes a real engine).

It follows vLLM 0.30.0's wire format: token-id prompts, ``prompt_logprobs`` as a list whose first
entry is null and whose entries map token-id strings to ``{"logprob", "rank", "decoded_token"}``,
``logprobs`` with ``tokens`` / ``token_logprobs`` / ``top_logprobs`` named ``token_id:N`` when
``return_tokens_as_token_ids`` is set, ``usage.prompt_tokens_details.cached_tokens``, prefix caching
in whole blocks keyed by ``cache_salt`` (at most prompt length - 1, never read by requests that ask
for ``prompt_logprobs``), and HTTP 400 with vLLM's error body when prompt + max_tokens exceeds
``max_model_len``.
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

import argparse
import importlib
import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

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
        token_delay: float = 0.0,
        prefill_delay: float = 0.0,
        length_keyed_cache: bool = False,
        metrics: bool | str = True,
        spec_accept: float | None = None,
        die_after: int | None = None,
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
        self.token_delay = token_delay  # seconds per generated token (a serving speed)
        self.prefill_delay = prefill_delay  # seconds per prompt token not read from the cache
        self.length_keyed_cache = length_keyed_cache  # blocks keyed by prompt length too: turns miss
        self.metrics = metrics
        self.spec_accept = spec_accept  # a speculative-decoding acceptance rate for /metrics
        self.die_after = die_after  # the process exits at this completion request + 1 (run as a process only)
        self.counters: dict[str, float] = {
            "vllm:request_success_total": 0.0,
            "vllm:generation_tokens_total": 0.0,
            "vllm:prompt_tokens_total": 0.0,
            "vllm:prefix_cache_queries_total": 0.0,
            "vllm:prefix_cache_hits_total": 0.0,
        }
        self.histograms = metrics == "timed"  # vLLM's timing histograms as well (decode time, time to first token)
        if self.histograms:
            for name in ("vllm:request_decode_time_seconds", "vllm:time_to_first_token_seconds"):
                self.counters[f"{name}_sum"] = 0.0
                self.counters[f"{name}_count"] = 0.0
        if spec_accept is not None:
            self.counters.update(
                {
                    "vllm:spec_decode_num_drafts_total": 0.0,
                    "vllm:spec_decode_num_draft_tokens_total": 0.0,
                    "vllm:spec_decode_num_accepted_tokens_total": 0.0,
                }
            )
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
        if self.length_keyed_cache:
            salt = f"{salt}#{n}"
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
        if not wants_prompt_lp:
            self.counters["vllm:prefix_cache_queries_total"] += n
            self.counters["vllm:prefix_cache_hits_total"] += cached
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
        self.counters["vllm:request_success_total"] += 1
        self.counters["vllm:generation_tokens_total"] += len(out_tokens)
        self.counters["vllm:prompt_tokens_total"] += n
        if self.spec_accept is not None:
            drafts = max(1, len(out_tokens) // 2)
            self.counters["vllm:spec_decode_num_drafts_total"] += drafts
            self.counters["vllm:spec_decode_num_draft_tokens_total"] += 2 * drafts
            self.counters["vllm:spec_decode_num_accepted_tokens_total"] += round(2 * drafts * self.spec_accept)
        self.last_timing = (n - cached, len(out_tokens))
        if self.histograms:  # what the server would have timed: the delays it is about to sleep
            self.counters["vllm:request_decode_time_seconds_sum"] += self.token_delay * max(0, len(out_tokens) - 1)
            self.counters["vllm:request_decode_time_seconds_count"] += 1
            self.counters["vllm:time_to_first_token_seconds_sum"] += self.prefill_delay * (n - cached) + 1e-4
            self.counters["vllm:time_to_first_token_seconds_count"] += 1
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


def handler_for(double: CompletionsDouble) -> type[BaseHTTPRequestHandler]:
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
            if self.path == "/metrics" and double.metrics:
                with double.lock:
                    lines = [f'{k}{{model_name="double"}} {v}' for k, v in double.counters.items()]
                data = ("\n".join(["# HELP vllm counters of the completions double", *lines]) + "\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
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
                if double.die_after is not None and double.requests > double.die_after:
                    print(f"completions_double: EngineCore died at request {double.requests}", flush=True)
                    os._exit(70)  # an engine that dies mid-check: no answer, the connection drops
                status, body = double.complete(req)
                uncached, generated = getattr(double, "last_timing", (0, 0)) if status == 200 else (0, 0)
                if status == 200 and double.prefill_delay:
                    time.sleep(double.prefill_delay * uncached)
            if status != 200 or not req.get("stream"):
                if status == 200 and double.token_delay:
                    time.sleep(double.token_delay * generated)
                self._send(status, body)
                return
            opts = req.get("stream_options") or {}
            self._stream(body, double.token_delay, bool(opts.get("continuous_usage_stats")))

        def _stream(self, body: dict[str, Any], delay: float, continuous: bool = False) -> None:
            """vLLM's server-sent events: one chunk per token, then the usage chunk, then [DONE]."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            choice = body["choices"][0]
            words = choice["text"].split(" ") if choice["text"] else []
            for i, word in enumerate(words):
                if delay:
                    time.sleep(delay)
                chunk = {"id": body["id"], "object": "text_completion", "model": "double"}
                chunk["choices"] = [{"index": 0, "text": (" " if i else "") + word, "finish_reason": None}]
                if continuous:
                    n = body["usage"]["prompt_tokens"]
                    chunk["usage"] = {"prompt_tokens": n, "completion_tokens": i + 1, "total_tokens": n + i + 1}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            tail = {"id": body["id"], "object": "text_completion", "model": "double", "choices": []}
            tail["usage"] = body["usage"]
            self.wfile.write(f"data: {json.dumps(tail)}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()

    return Handler


@contextmanager
def serving(**flags: Any) -> Iterator[tuple[str, CompletionsDouble]]:
    """A double with ``flags`` served on 127.0.0.1 in a thread: ``(base URL, double)``; stopped on exit."""
    if flags.get("die_after") is not None:
        raise ValueError("die_after exits the process: use it with the double run as its own process (main)")
    double = CompletionsDouble(**flags)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(double))
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", double
    finally:
        httpd.shutdown()
        httpd.server_close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.completions_double")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--faults-from", default="", help="a module whose FAULTS dict gives the double's flags")
    parser.add_argument(
        "--flag", action="append", default=[], metavar="NAME=JSON", help="one flag, e.g. token_delay=0.004"
    )
    args = parser.parse_args(argv)
    flags: dict[str, Any] = {}
    for item in args.flag:
        name, _, value = item.partition("=")
        flags[name] = json.loads(value)
    if args.faults_from:
        module = importlib.import_module(args.faults_from)
        flags.update(module.FAULTS)
        print(f"completions_double: {args.faults_from} from {module.__file__}: {flags}", flush=True)
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(CompletionsDouble(**flags)))
    print(f"completions_double: serving on 127.0.0.1:{args.port}", flush=True)
    httpd.serve_forever(poll_interval=0.05)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
