"""CLI commands: verify (per-patch tests) and check longctx."""

from __future__ import annotations

import os
from pathlib import Path

import click

from patchset.cli import (
    Ctx,
    SuggestingGroup,
    _one_target_arg,
    _progress_bar,
    emit_json,
    guarded,
    json_opt,
    only_option,
    out,
    plan_options,
    target_option,
    tree_dir,
    tree_option,
)
from patchset.text import split_list


@click.command()
@click.option(
    "--tags",
    "tags",
    multiple=True,
    metavar="TAG[,TAG]",
    help="Run only tests carrying one of these tags (repeatable or comma-separated), e.g. cpu.",
)
@tree_option("a pristine one, never modified (verify works on private copies)", dest="tree_arg")
@click.option(
    "--from-index",
    "spec_arg",
    default=None,
    metavar="[NAME=]SPEC",
    help="A release from the package index, as in apply, e.g. vllm==0.30.0 (default: the target's base).",
)
@target_option("verify", "default: the only target with tests to run")
@click.option(
    "--jobs",
    "-j",
    type=int,
    default=os.cpu_count() or 1,
    show_default=True,
    metavar="N",
    help="Test runs at a time.",
)
@click.option(
    "--timeout", type=int, default=None, metavar="SECONDS", help="Seconds per test run, overriding the ledger's."
)
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write JUnit XML here.")
@click.option("--keep-trees", is_flag=True, help="Keep the build trees and full logs (path in the report).")
@click.option(
    "--engine", default=None, metavar="NAME", help="Run every engine test on this engine ([engines.NAME] or a preset)."
)
@only_option("run only its tests (comma-separated ids too)")
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Compare serving tests with the figures stored in FILE instead of the tree without the patch.",
)
@click.option(
    "--save-baseline",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Store the serving figures of the tree with the series in FILE.",
)
@click.option("--no-cache", is_flag=True, help="Measure again even when a tree's results are cached.")
@plan_options
@json_opt
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
    no_cache,
    plan_only,
    all_,
    full_every,
    as_json,
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

    if not plan_only:  # the tests' commands and engines; --plan runs none
        consent.require_at(c.ledger_path, consent.TESTS)
    tree, from_index = None, None
    if tree_arg or spec_arg:
        target, value = _one_target_arg(c, "tree" if tree_arg else "from-index", tree_arg or spec_arg, target)
        tree, from_index = (tree_dir(value, tree_arg), None) if tree_arg else (None, value)
    with _progress_bar() as bar:
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
                use_cache=not no_cache,
                history=default_history_path(Path(c.ledger_path).parent),
                plan_only=plan_only,
                all_=all_,
                full_every=full_every,
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
@click.option("--model", default=None, metavar="NAME", help="Model name (default: the server's first model).")
@click.option(
    "--checks",
    "checks",
    multiple=True,
    metavar="NAME[,NAME]",
    help="causality, resume, cached, rescore, reference, copy (default: the first four).",
)
@click.option(
    "--mode",
    type=click.Choice(["fixed", "control"]),
    default="fixed",
    show_default=True,
    help="fixed bars (deterministic engines) or a multiple of a measured control (GPU clusters).",
)
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Recorded cached-token baseline (JSON) for the `cached` check.",
)
@click.option(
    "--reference-model",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Model directory for the transformers reference forward pass (`reference` check).",
)
@click.option("--timeout", type=float, default=600.0, show_default=True, metavar="SECONDS", help="Seconds per request.")
@json_opt
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
