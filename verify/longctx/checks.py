"""The long-context checks themselves: causality, resume, cached, rescore, reference, copy.

Why this module exists: each check sends its prompts through one ``CheckRun`` (client, document,
thresholds, memoised warm resumes) and returns measurements held against their bars; ``run_checks``
(``verify.longctx``) runs the ones asked for and pools control-mode bars.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from patchset.verify.engines.client import BadResponse, Completion, CompletionsClient, ServerRejected, new_salt
from patchset.verify.longctx.measures import BIN, binned_max, make_document, max_abs_diff, mean_nll, top1, topk_drift
from patchset.verify.longctx.params import CachedCase, Lengths, LongctxRun, Mode, Thresholds
from patchset.verify.longctx.report import Measurement


class CheckRun:
    """State shared by the checks of one run: client, document, thresholds, memoised warm resumes."""

    def __init__(
        self, client: CompletionsClient, run: LongctxRun, lengths: Lengths, thresholds: Thresholds, extra_doc: int = 0
    ) -> None:
        self.client = client
        self.lengths = lengths
        self.th = thresholds
        self.seed = run.seed
        self.token_range = run.token_range
        self.top_k = run.top_k
        self.measure_control = run.measure_control or thresholds.mode == Mode.CONTROL
        low, high = run.token_range
        self.doc = make_document(max(lengths.doc_tokens(), extra_doc), seed=run.seed, low=low, high=high)
        self._warm: dict[tuple[int, int], tuple[Completion, Completion]] = {}

    def prompt_lps(self, n: int, tag: str) -> list[float | None]:
        prompt = self.doc[:n]
        comp = self.client.complete(prompt, max_tokens=1, prompt_logprobs=1, cache_salt=new_salt(tag))
        lps = comp.prompt_token_logprobs(prompt)
        if len(comp.prompt_logprobs) < n:
            raise BadResponse(f"server returned {len(comp.prompt_logprobs)} prompt logprobs for {n} prompt tokens")
        return lps

    def warm_resume(self, warm: int, prompt: int) -> tuple[Completion, Completion]:
        """Send doc[:warm], then doc[:prompt] under the same salt: (warm answer, resumed answer)."""
        key = (warm, prompt)
        if key not in self._warm:
            salt = new_salt(f"warm{warm}")
            first = self.client.complete(self.doc[:warm], max_tokens=1, logprobs=self.top_k, cache_salt=salt)
            second = self.client.complete(self.doc[:prompt], max_tokens=1, logprobs=self.top_k, cache_salt=salt)
            self._warm[key] = (first, second)
        return self._warm[key]

    def ensure_doc(self, n: int) -> None:
        if len(self.doc) < n:
            self.doc = make_document(n, seed=self.seed, low=self.token_range[0], high=self.token_range[1])


def pool_control(th: Thresholds, check: str, measurements: list[Measurement]) -> None:
    """In control mode, judge every case of a check against the largest control of that check.

    One resend per case is a noisy estimate of the engine's noise (a max over a few top-k logprobs);
    pooling the cases' controls gives a steadier bar. Each case keeps its own control in the report."""
    if not th.uses_control(check):
        return
    controls = [m.control for m in measurements if m.control is not None and math.isfinite(m.control)]
    if not controls:
        return
    pooled = max(controls)
    for m in measurements:
        if m.value is None:
            continue
        m.bar = th.bar(check, pooled)
        m.ok = th.passes(check, float(m.value), pooled)
        m.details["pooled_control"] = pooled


def _failed_case(case: str, metric: str, exc: Exception) -> Measurement:
    return Measurement(case=case, metric=metric, value=None, ok=False, details={"error": str(exc)})


def _judged(
    run: CheckRun, check: str, case: str, metric: str, drift: float, control: float | None, details: dict[str, Any]
) -> Measurement:
    """A drift held against the check's bar: fixed, or (control mode) a multiple of ``control``."""
    return Measurement(
        case=case,
        metric=metric,
        value=drift,
        control=control,
        bar=run.th.bar(check, control),
        ok=run.th.passes(check, drift, control),
        details=details,
    )


def check_causality(run: CheckRun) -> list[Measurement]:
    L = run.lengths
    out: list[Measurement] = []
    try:
        full = run.prompt_lps(L.total, "causal-full")
    except (ServerRejected, BadResponse) as exc:
        return [_failed_case(f"N={n} of {L.total}", "max |dlogprob|", exc) for n in L.causal]
    for n in L.causal:
        case = f"N={n} of {L.total}"
        try:
            part = run.prompt_lps(n, f"causal{n}")
            control = None
            if run.measure_control:
                again = run.prompt_lps(n, f"causal{n}-control")
                control, _ = max_abs_diff(part, again)
        except (ServerRejected, BadResponse) as exc:
            out.append(_failed_case(case, "max |dlogprob|", exc))
            continue
        drift, where = max_abs_diff(full[:n], part)
        details = {
            "worst_position": where,
            "positions": n - 1,
            "past_boundary": n > L.boundary,
            "binned_max": binned_max(full[:n], part),
        }
        out.append(_judged(run, "causality", case, "max |dlogprob|", drift, control, details))
    return out


def check_resume(run: CheckRun) -> list[Measurement]:
    L = run.lengths
    out: list[Measurement] = []
    for warm in L.resume:
        prompt_len = warm + L.resume_tail
        case = f"warm {warm} + {L.resume_tail}"
        try:
            cold = run.client.complete(
                run.doc[:prompt_len], max_tokens=1, logprobs=run.top_k, cache_salt=new_salt(f"cold{warm}")
            )
            _, resumed = run.warm_resume(warm, prompt_len)
            control = None
            if run.measure_control:
                cold2 = run.client.complete(
                    run.doc[:prompt_len], max_tokens=1, logprobs=run.top_k, cache_salt=new_salt(f"cold{warm}-control")
                )
                control = topk_drift(cold.top_logprobs[0], cold2.top_logprobs[0])
            cold_top, warm_top = cold.top_logprobs[0], resumed.top_logprobs[0]
        except IndexError:
            out.append(_failed_case(case, "top-k drift", BadResponse("no top_logprobs for the first generated token")))
            continue
        except (ServerRejected, BadResponse) as exc:
            out.append(_failed_case(case, "top-k drift", exc))
            continue
        details = {
            "cached_tokens": resumed.usage.cached_tokens,
            "prompt_tokens": prompt_len,
            "note": (
                None
                if resumed.usage.cached_tokens
                else "no prefix-cache hit reported: this case compared two cold prefills"
            ),
            "top1_cold": top1(cold_top),
            "top1_warm": top1(warm_top),
            "cold_top": cold_top,
            "warm_top": warm_top,
        }
        out.append(_judged(run, "resume", case, "top-k drift", topk_drift(cold_top, warm_top), control, details))
    return out


def check_cached(run: CheckRun, cases: Sequence[CachedCase]) -> list[Measurement]:
    out: list[Measurement] = []
    run.ensure_doc(max(c.prompt_tokens for c in cases))
    for c in cases:
        case = f"{c.case}: warm {c.warm_tokens} -> {c.prompt_tokens}"
        try:
            first, second = run.warm_resume(c.warm_tokens, c.prompt_tokens)
        except (ServerRejected, BadResponse) as exc:
            out.append(_failed_case(case, "cached_tokens", exc))
            continue
        got = second.usage.cached_tokens
        details: dict[str, Any] = {
            "expected": c.cached_tokens,
            "prompt_tokens": second.usage.prompt_tokens,
            "warm_cached_tokens": first.usage.cached_tokens,
        }
        if got is None:
            details["error"] = (
                "server reports no usage.prompt_tokens_details.cached_tokens "
                "(start vLLM with --enable-prompt-tokens-details)"
            )
        out.append(
            Measurement(
                case=case,
                metric="cached_tokens",
                value=got,
                bar=c.cached_tokens,
                ok=(got == c.cached_tokens),
                details=details,
            )
        )
    return out


def check_rescore(run: CheckRun) -> list[Measurement]:
    L = run.lengths
    case = f"{L.rescore_prompt} + {L.rescore_reply} greedy"
    prompt = run.doc[: L.rescore_prompt]
    try:
        gen = run.client.complete(prompt, max_tokens=L.rescore_reply, logprobs=1, cache_salt=new_salt("gen"))
        if len(gen.tokens) != L.rescore_reply or len(gen.token_logprobs) != len(gen.tokens):
            raise BadResponse(
                f"asked for {L.rescore_reply} tokens with logprobs, got {len(gen.tokens)} tokens "
                f"and {len(gen.token_logprobs)} logprobs"
            )
        full = prompt + gen.tokens
        pre = run.client.complete(full, max_tokens=1, prompt_logprobs=1, cache_salt=new_salt("rescore"))
        rescored = pre.prompt_token_logprobs(full)[len(prompt) :]
        control = None
        same = len(gen.tokens)
        if run.measure_control:
            gen2 = run.client.complete(prompt, max_tokens=L.rescore_reply, logprobs=1, cache_salt=new_salt("gen2"))
            # compare the resend up to the first token where the greedy paths part (noise can flip a near tie)
            same = next(
                (i for i, (a, b) in enumerate(zip(gen.tokens, gen2.tokens, strict=False)) if a != b),
                min(len(gen.tokens), len(gen2.tokens)),
            )
            control = max_abs_diff(gen.token_logprobs[:same], gen2.token_logprobs[:same])[0] if same else math.nan
    except (ServerRejected, BadResponse) as exc:
        return [_failed_case(case, "max |dlogprob|", exc)]
    decoded: list[float | None] = list(gen.token_logprobs)
    drift, where = max_abs_diff(decoded, rescored)
    diffs = [None if (a is None or b is None) else abs(a - b) for a, b in zip(decoded, rescored, strict=False)]
    cross = L.boundary - len(prompt)  # index of the first reply token at position >= boundary
    before = [d for d in diffs[: max(cross, 0)] if d is not None]
    after = [d for d in diffs[max(cross, 0) :] if d is not None]
    details = {
        "worst_reply_index": where,
        "worst_position": len(prompt) + where if where >= 0 else None,
        "max_before_boundary": max(before) if before else None,
        "max_past_boundary": max(after) if after else None,
        "reply_tokens": gen.tokens,
        "per_token_diff": diffs,
        "control_tokens_compared": same if run.measure_control else None,
    }
    return [_judged(run, "rescore", case, "max |dlogprob|", drift, control, details)]


def check_reference(run: CheckRun, reference: Callable[[Sequence[int]], Sequence[float | None]]) -> list[Measurement]:
    L = run.lengths
    case = f"{L.reference} tokens vs transformers fp32"
    try:
        server = run.prompt_lps(L.reference, "reference")
    except (ServerRejected, BadResponse) as exc:
        return [_failed_case(case, "max |dlogprob|", exc)]
    ref = list(reference(run.doc[: L.reference]))
    drift, where = max_abs_diff(server, ref)
    before, _ = max_abs_diff(server[: L.boundary], ref[: L.boundary])
    after, _ = max_abs_diff(server[L.boundary :], ref[L.boundary :]) if L.reference > L.boundary else (0.0, -1)
    details = {
        "worst_position": where,
        "max_before_boundary": before,
        "max_past_boundary": after,
        "binned_max": binned_max(server, ref),
        "mean_nll_server": mean_nll(server),
        "mean_nll_reference": mean_nll(ref),
    }
    return [_judged(run, "reference", case, "max |dlogprob|", drift, None, details)]


def check_copy(run: CheckRun) -> list[Measurement]:
    L = run.lengths
    n = L.copy_passage
    passage = make_document(n, seed=run.seed + 7919, low=run.token_range[0], high=run.token_range[1])
    prompt = passage + passage
    case = f"passage {n} x 2"
    try:
        comp = run.client.complete(prompt, max_tokens=1, prompt_logprobs=1, cache_salt=new_salt("copy"))
    except (ServerRejected, BadResponse) as exc:
        return [_failed_case(case, "NLL 2nd/1st copy", exc)]
    lps = comp.prompt_token_logprobs(prompt)
    first = mean_nll(lps[1:n])
    second = mean_nll(lps[n + 1 :])  # the first token of the second copy is not predictable
    bins = [mean_nll(lps[lo : lo + BIN]) for lo in range(0, len(lps), BIN)]
    ratio = (second / first) if (first and second is not None) else None
    bar = run.th.fixed["copy"]
    ok = ratio is not None and ratio <= bar
    return [
        Measurement(
            case=case,
            metric="NLL 2nd/1st copy",
            value=ratio,
            bar=bar,
            ok=ok,
            details={
                "nll_first_copy": first,
                "nll_second_copy": second,
                "binned_nll": bins,
                "prompt_tokens": len(prompt),
            },
        )
    ]
