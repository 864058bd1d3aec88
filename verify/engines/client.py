"""A small client for the OpenAI-compatible ``/v1/completions`` endpoint with token-id prompts.

Why this module exists: the long-context checks need exactly the parts of the completions schema
that carry numbers — prompt logprobs, generated-token logprobs with their top-k, and
``usage.prompt_tokens_details.cached_tokens`` — keyed by token id, not by text. This client sends
token-id prompts, asks the server to name tokens by id (``return_tokens_as_token_ids``, a vLLM
extension) and turns the response into plain dataclasses. Transport problems become
``ServerUnreachable`` (an environment failure, exit 2); an HTTP error answer from a server that is up
becomes ``ServerRejected``, which the checks record as a FAILED check (a server that refuses a long
prompt is broken for long contexts, not "skipped").
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import requests

from patchset.errors import EnvironmentFailure, InputError
from patchset.upstream import net


class ServerUnreachable(EnvironmentFailure):
    """The server could not be reached or did not answer in time (exit 2)."""


class ServerRejected(Exception):
    """The server answered a request with an HTTP error status (e.g. 400 for a too-long prompt)."""

    def __init__(self, status: int, message: str, *, prompt_tokens: int | None = None) -> None:
        where = f" (prompt of {prompt_tokens} tokens)" if prompt_tokens is not None else ""
        super().__init__(f"HTTP {status}{where}: {message}")


class NotCompletionsServer(EnvironmentFailure):
    """The URL answers, but not as an OpenAI-compatible server (no usable /v1/models): exit 2."""


class BadResponse(Exception):
    """The server answered 200 but the body does not follow the completions schema."""


@dataclass
class Usage:
    """Token counts a completion reports."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None  # None when the server does not report prompt_tokens_details

    @classmethod
    def parse(cls, raw: dict[str, Any], prompt_tokens: int = 0, completion_tokens: int = 0) -> Usage:
        """An answer's ``usage`` object; the counts it lacks default to those given."""
        details = raw.get("prompt_tokens_details") or None
        cached = details.get("cached_tokens") if details else None
        return cls(
            prompt_tokens=int(raw.get("prompt_tokens", prompt_tokens)),
            completion_tokens=int(raw.get("completion_tokens", completion_tokens)),
            cached_tokens=int(cached) if cached is not None else None,
        )


@dataclass
class Completion:
    """One choice of a completions answer, with every token named by id."""

    tokens: list[int]  # generated token ids
    token_logprobs: list[float]  # logprob of each generated token
    top_logprobs: list[dict[int, float]]  # top-k alternatives per generated token
    prompt_logprobs: list[dict[int, float] | None]  # per prompt position; position 0 is None
    usage: Usage
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    def prompt_token_logprobs(self, prompt: Sequence[int]) -> list[float | None]:
        """Logprob of each actual prompt token (None at position 0 and where the server sent none)."""
        out: list[float | None] = []
        for pos, tok in enumerate(prompt):
            entry = self.prompt_logprobs[pos] if pos < len(self.prompt_logprobs) else None
            out.append(None if entry is None else entry.get(int(tok)))
        return out


@dataclass
class Streamed:
    """A streamed completion's timing: seconds to the first token, to the last, and the counts."""

    first_token_seconds: float
    last_token_seconds: float
    chunks: int  # chunks that carried text
    usage: Usage
    tokens: list[int] = field(default_factory=list)
    first_count: int = 1  # tokens delivered with the first chunk (continuous usage stats)
    last_count: int = 0  # tokens delivered up to the last chunk

    @property
    def decode_tokens_per_second(self) -> float | None:
        """Tokens delivered after the first chunk over the time between the first chunk and the last
        (a server that batches several tokens per chunk is measured right); None: too few chunks."""
        span = self.last_token_seconds - self.first_token_seconds
        n = (self.last_count or self.usage.completion_tokens) - self.first_count
        return n / span if n > 0 and span > 0 else None


def new_salt(tag: str = "") -> str:
    """A cache salt no earlier request used: guarantees a cold prefix cache for this request."""
    return f"patchset-{tag}-{uuid.uuid4().hex}"


def _token_id(key: str | int) -> int:
    """Token keys come as 'token_id:123' (return_tokens_as_token_ids) or as the bare id."""
    if isinstance(key, int):
        return key
    try:
        return int(str(key).removeprefix("token_id:"))
    except ValueError as exc:
        raise BadResponse(
            f"token key {key!r} is not a token id; the server ignored return_tokens_as_token_ids"
        ) from exc


def _float(value: Any) -> float:
    return -math.inf if value is None else float(value)


def _prompt_entry(entry: Any) -> dict[int, float] | None:
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise BadResponse(f"prompt_logprobs entry is {type(entry).__name__}, expected an object")
    return {_token_id(k): _float(v.get("logprob") if isinstance(v, dict) else v) for k, v in entry.items()}


def parse_completion(body: dict[str, Any]) -> Completion:
    """Turn a completions response body into a ``Completion`` (first choice)."""
    try:
        return _parse_completion(body)
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        raise BadResponse(
            f"response does not follow the completions schema ({exc.__class__.__name__}: "
            f"{exc}): {json.dumps(body)[:300]}"
        ) from exc


def _parse_completion(body: dict[str, Any]) -> Completion:
    try:
        choice = body["choices"][0]
        usage_raw = body.get("usage") or {}
    except (KeyError, IndexError, TypeError) as exc:
        raise BadResponse(f"response has no choices: {json.dumps(body)[:300]}") from exc
    lp = choice.get("logprobs") or {}
    return Completion(
        tokens=[_token_id(t) for t in (lp.get("tokens") or [])],
        token_logprobs=[_float(x) for x in (lp.get("token_logprobs") or [])],
        top_logprobs=[{_token_id(k): _float(v) for k, v in (d or {}).items()} for d in (lp.get("top_logprobs") or [])],
        prompt_logprobs=[_prompt_entry(e) for e in (choice.get("prompt_logprobs") or [])],
        usage=Usage.parse(usage_raw),
        raw=body,
    )


def _unreachable(exc: Exception, what: str, hint: str) -> ServerUnreachable:
    """The error of a request that got no answer: a network limit says its own message and hint,
    a broken connection is ``what`` with the exception named."""
    if isinstance(exc, net.NetLimit):
        return ServerUnreachable(exc.message, hint=exc.hint)
    return ServerUnreachable(f"{what}: {exc.__class__.__name__}: {exc}", hint=hint)


def _error_message(raw: bytes, reason: str | None) -> str:
    """The message of an error answer: vLLM/OpenAI ``{"error": {"message"}}``, FastAPI ``{"detail"}``, or text."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip() or reason or ""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        for key in ("message", "detail", "error"):
            if body.get(key):
                return str(body[key])
    return json.dumps(body)[:500]


def _upto(chunks: Iterator[bytes], limit: int) -> Iterator[bytes]:
    """The first ``limit`` bytes of ``chunks``."""
    got = 0
    for chunk in chunks:
        if got >= limit:
            return
        yield chunk[: limit - got]
        got += len(chunk)


def _lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Lines (without their ending) of a body read chunk by chunk, as they complete (each byte is
    looked at once: a server that never sends a newline costs its bytes, not their square)."""
    parts: list[bytes] = []
    for chunk in chunks:
        start = 0
        while (i := chunk.find(b"\n", start)) >= 0:
            parts.append(chunk[start:i])
            yield b"".join(parts).rstrip(b"\r")
            parts, start = [], i + 1
        if start < len(chunk):
            parts.append(chunk[start:])
    if parts:
        yield b"".join(parts)


class CompletionsClient:
    """Talks to one OpenAI-compatible server. ``base_url`` is e.g. ``http://127.0.0.1:8000``."""

    def __init__(
        self, base_url: str, model: str | None = None, *, timeout: float = 600.0, keepalive: bool = True
    ) -> None:
        url = base_url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise InputError(
                f"server URL {base_url!r} must start with http:// or https://", hint="e.g. --url http://127.0.0.1:8000"
            )
        self.base_url = url.removesuffix("/v1")
        self.timeout = timeout
        self._session = net.session(trust_env=False)  # never route loopback traffic through a proxy
        if not keepalive:
            # a new connection per request: a kept-alive one the server closed as idle (uvicorn: after
            # 5 s) is reset when reused at that moment, which would fail a measurement for nothing
            self._session.headers["Connection"] = "close"
        self.model = model or self._first_model()

    def _request(
        self, method: str, path: str, payload: dict[str, Any] | None = None, prompt_tokens: int | None = None
    ) -> dict[str, Any]:
        # One answer may take up to --timeout as a whole (a long prompt is computed before the first
        # byte), not longer however slowly it trickles; the engine's time is not the command's
        # network budget. Prompt logprobs of a long prompt are large: the body cap, not the JSON one.
        try:
            resp = net.request(
                self._session,
                method,
                self.base_url + path,
                what=f"{method} {path}",
                cap=net.BODY,
                json=payload,
                timeout=self.timeout,
                seconds=self.timeout,
                knob="--timeout",
                charge=False,
            )
        except (net.NetLimit, requests.RequestException) as exc:
            raise _unreachable(
                exc, f"cannot reach {self.base_url}{path}", "is the server running? check --url"
            ) from exc
        if resp.status >= 400:
            raise ServerRejected(resp.status, _error_message(resp.body, resp.reason)[:500], prompt_tokens=prompt_tokens)
        try:
            body = json.loads(resp.body)
        except ValueError as exc:
            raise BadResponse(f"{path} answered non-JSON: {resp.body[:200]!r}") from exc
        if not isinstance(body, dict):
            raise BadResponse(f"{path} answered {type(body).__name__}, expected an object")
        return body

    def _stream(self, method: str, path: str, what: str, seconds: float, **kwargs: Any) -> Any:
        """``net.stream`` to this server: the whole answer within ``seconds`` (a check's time, not
        the command's network budget); other arguments go to ``net.stream``."""
        return net.stream(
            self._session,
            method,
            self.base_url + path,
            what=what,
            timeout=seconds,
            seconds=seconds,
            charge=False,
            **kwargs,
        )

    def _models(self) -> list[dict[str, Any]]:
        try:
            data = self._request("GET", "/v1/models").get("data")
        except (ServerRejected, BadResponse) as exc:
            raise NotCompletionsServer(
                f"{self.base_url}/v1/models: {exc}", hint="--url must point at an OpenAI-compatible server"
            ) from exc
        if not isinstance(data, list) or not all(isinstance(d, dict) and "id" in d for d in data):
            raise NotCompletionsServer(f"{self.base_url}/v1/models: no 'data' list of models")
        return data

    def _first_model(self) -> str:
        data = self._models()
        if not data:
            raise NotCompletionsServer(f"{self.base_url}/v1/models lists no model")
        return str(data[0]["id"])

    def model_info(self) -> dict[str, Any]:
        """The /v1/models entry of this client's model (vLLM adds ``max_model_len``)."""
        return next((dict(item) for item in self._models() if item.get("id") == self.model), {})

    def _greedy(self, prompt: Sequence[int], max_tokens: int, ignore_eos: bool, **extra: Any) -> dict[str, Any]:
        """The body of a greedy completion of a token-id prompt, with the request's own fields
        (``extra``; one that is None is left out)."""
        payload: dict[str, Any] = {
            "model": self.model,
            "prompt": [int(t) for t in prompt],
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "return_tokens_as_token_ids": True,
            "ignore_eos": ignore_eos,
        }
        payload.update((k, v) for k, v in extra.items() if v is not None)
        return payload

    def stream(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int,
        cache_salt: str | None = None,
        ignore_eos: bool = True,
        max_bytes: int = 64 * 1024 * 1024,
    ) -> Streamed:
        """A greedy streamed completion, timed: when the first and the last token arrived."""
        stream_options = {"include_usage": True, "continuous_usage_stats": True}
        payload = self._greedy(
            prompt, max_tokens, ignore_eos, stream=True, stream_options=stream_options, cache_salt=cache_salt
        )
        tally = _Tally(time.monotonic())
        # The whole answer within the request's timeout, however slowly it trickles (the deadline of
        # patchset.upstream.net, as _request): a server that sends a byte now and then must not hold
        # a check for longer than its timeout.
        try:
            with self._stream(
                "POST",
                "/v1/completions",
                "POST /v1/completions (streamed)",
                self.timeout,
                json=payload,
                knob="the test's timeout",
            ) as st:
                if st.status >= 400:
                    body = b"".join(_upto(st.chunks(), 64 * 1024))
                    raise ServerRejected(
                        st.status,
                        _error_message(body, str(getattr(st.response, "reason", "") or ""))[:500],
                        prompt_tokens=len(prompt),
                    )
                for event in _events(_lines(st.chunks(max_bytes, "the stream's cap"))):
                    tally.add(event)
        except net.TooLarge as exc:
            raise BadResponse(f"the stream exceeds {max_bytes} bytes: {exc.message}") from None
        except (net.NetLimit, requests.RequestException) as exc:
            raise _unreachable(
                exc, f"the stream from {self.base_url}/v1/completions broke", "is the server running?"
            ) from exc
        return tally.streamed(len(prompt))

    def metrics_text(self, max_bytes: int = 16 * 1024 * 1024) -> str | None:
        """The server's Prometheus ``/metrics`` text, or None when it has none (or not whole within
        min(timeout, 30 s), or larger than ``max_bytes``)."""
        seconds = min(self.timeout, 30.0)
        try:
            with self._stream("GET", "/metrics", "GET /metrics", seconds) as st:
                if st.status != 200:
                    return None
                body = st.read(max_bytes, "the /metrics cap")
        except (net.NetLimit, requests.RequestException):
            return None
        return body.decode("utf-8", "replace")

    def complete(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int = 1,
        logprobs: int | None = None,
        prompt_logprobs: int | None = None,
        cache_salt: str | None = None,
        ignore_eos: bool = True,
    ) -> Completion:
        """Greedy completion of a token-id prompt."""
        payload = self._greedy(
            prompt, max_tokens, ignore_eos, logprobs=logprobs, prompt_logprobs=prompt_logprobs, cache_salt=cache_salt
        )
        body = self._request("POST", "/v1/completions", payload, prompt_tokens=len(payload["prompt"]))
        return parse_completion(body)


def _events(lines: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a server-sent event stream, up to ``[DONE]``."""
    for raw in lines:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            body = json.loads(data)
        except ValueError as exc:
            raise BadResponse(f"a stream chunk is not JSON: {data[:200]!r}") from exc
        if not isinstance(body, dict):
            raise BadResponse(f"a stream chunk is {type(body).__name__}, expected an object")
        yield body


@dataclass
class _Tally:
    """A stream's tokens as they arrive: when the first and the last came, and the running counts."""

    t0: float
    first: float | None = None
    last: float | None = None
    chunks: int = 0
    first_count: int = 0
    last_count: int = 0
    usage: dict[str, Any] = field(default_factory=dict)
    tokens: list[int] = field(default_factory=list)

    def add(self, body: dict[str, Any]) -> None:
        now = time.monotonic() - self.t0
        running = (body.get("usage") or {}).get("completion_tokens")
        for choice in body.get("choices") or []:
            if choice.get("text"):
                self.chunks += 1
                count = int(running) if isinstance(running, int) else self.chunks
                if self.first is None:
                    self.first, self.first_count = now, count
                self.last, self.last_count = now, count
                lp = choice.get("logprobs") or {}
                self.tokens += [_token_id(t) for t in (lp.get("tokens") or [])]
        if body.get("usage"):
            self.usage = body["usage"]

    def streamed(self, prompt_tokens: int) -> Streamed:
        if self.first is None or self.last is None:
            raise BadResponse("the stream carried no token")
        usage = Usage.parse(self.usage, prompt_tokens, self.chunks)
        return Streamed(self.first, self.last, self.chunks, usage, self.tokens, self.first_count, self.last_count)
