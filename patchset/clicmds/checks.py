"""CLI commands: verify (per-patch tests) and check longctx."""

from __future__ import annotations

import os
from pathlib import Path

import click

from patchset.cli import Ctx, SuggestingGroup, emit_json, guarded, out, progress_bar
from patchset.clicmds import options as opt
from patchset.text import split_list


@click.command()
@opt.tags
@opt.tree("a pristine one, never modified (verify works on private copies)", dest="tree_arg")
@opt.from_index(
    "A release from the package index, as in apply, e.g. vllm==0.30.0 (default: the target's base).", dest="spec_arg"
)
@opt.target("verify", "default: the only target with tests to run")
@click.option(
    "--jobs",
    "-j",
    type=int,
    default=os.cpu_count() or 1,
    show_default=True,
    metavar="N",
    help="Test runs at a time.",
)
@opt.value("--timeout", "SECONDS", "Seconds per test run, overriding the ledger's.", type=int)
@opt.path("--junit", "Write JUnit XML here.", dir_okay=False)
@click.option("--keep-trees", is_flag=True, help="Keep the build trees and full logs (path in the report).")
@opt.engine("[engines.NAME] or a preset")
@opt.only("run only its tests (comma-separated ids too)")
@opt.path(
    "--baseline",
    "Compare serving tests with the figures stored in FILE instead of the tree without the patch.",
    dir_okay=False,
)
@opt.path("--save-baseline", "Store the serving figures of the tree with the series in FILE.", dir_okay=False)
@opt.reuse
@opt.json
@click.pass_obj
@guarded
def verify(
    c: Ctx,
    tags,
    tree_arg,
    spec_arg,
    target,
    jobs,
    timeout,
    junit,
    keep_trees,
    engine,
    only,
    baseline,
    save_baseline,
    as_json,
    **reused,
) -> int:
    """Run each patch's tests with the series and without that patch.

    \b
    Classes: proven (fails without, passes with), not needed (passes without: the patch may be
    upstream or dead), broken (fails with), error (could not run). A serving test fails with the
    patch on a regression (the 95% interval of a ratio beyond the tolerance), without it on an
    improvement.
    Long-context tests follow a plan: a patch whose watched files, body and tests did not move since
    the run that proved it carries that verdict (proofs in .patchset/verify-proofs.json beside the
    ledger); --plan prints it and starts nothing.
    Exit 0 every patch proven (--plan: the plan was made); 1 a patch broken or not needed; 2 a test
    could not run / bad input.
    """
    from patchset.ledger import consent
    from patchset.verify.pertest import VerifyRun, run_verify
    from patchset.verify.proofs import default_history_path

    if not reused["plan_only"]:  # the tests' commands and engines; --plan runs none
        consent.require_at(c.ledger_path, consent.TESTS)
    tree, from_index = None, None
    if tree_arg or spec_arg:
        target, value = opt.one_target(c, "tree" if tree_arg else "from-index", tree_arg or spec_arg, target)
        tree, from_index = (opt.tree_dir(value, tree_arg), None) if tree_arg else (None, value)
    with progress_bar() as bar:
        progress = bar.callback("verify")
        rep = run_verify(
            VerifyRun(
                c.ledger_path,
                tree,
                from_index=from_index,
                tags=list(tags),
                jobs=jobs,
                timeout=timeout,
                junit=junit,
                progress=progress,
                target=target,
                keep_trees=keep_trees,
                download_progress=bar.callback("", unit="bytes"),
                engine=engine,
                only=split_list(only) or None,
                baseline=baseline,
                save_baseline=save_baseline,
                history=default_history_path(Path(c.ledger_path).parent),
                **opt.reused_args(reused),
            )
        )
    if as_json:
        emit_json(rep.to_json())
    else:
        from patchset.verify.pertest_view import render_verify

        render_verify(out, rep)
    return rep.exit_code


@click.group(cls=SuggestingGroup)
def check() -> None:
    """Checks against a running server (long-context correctness past 2,048 tokens)."""


@check.command("longctx")
@click.option(
    "--url", required=True, metavar="URL", help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000."
)
@opt.value("--model", "NAME", "Model name (default: the server's first model).")
@click.option(
    "--checks",
    "checks",
    multiple=True,
    metavar="NAME[,NAME]",
    help="causality, resume, cached, rescore, reference, copy (default: the first four).",
)
@opt.choice(
    "--mode",
    ["fixed", "control"],
    "fixed bars (deterministic engines) or a multiple of a measured control (GPU clusters).",
    default="fixed",
)
@opt.path("--baseline", "Recorded cached-token baseline (JSON) for the `cached` check.", dir_okay=False)
@opt.path(
    "--reference-model",
    "Model directory for the transformers reference forward pass (`reference` check).",
    file_okay=False,
)
@click.option("--timeout", type=float, default=600.0, show_default=True, metavar="SECONDS", help="Seconds per request.")
@opt.json
@guarded
def check_longctx(url, model, checks, mode, baseline, reference_model, timeout, as_json) -> int:
    """Long-context checks with token-id prompts on both sides of 2,048 tokens.

    \b
    Exit 0 every check passes; 1 a check fails (a server that rejects a long prompt is a failure);
    2 the server cannot be reached or the input is bad.
    """
    from patchset.verify.longctx.suite import LongctxRun, run_checks

    names = split_list(checks) or None
    report = run_checks(
        LongctxRun(url, model, names, mode=mode, baseline=baseline, reference_model=reference_model, timeout=timeout)
    )
    if as_json:
        click.echo(report.to_json())
    else:
        from patchset.verify.longctx.view import render_longctx

        render_longctx(out, report)
    return report.exit_code
