"""Open or update the gate's pull request (green) and its one issue (red), through PyGithub.

    python -m patchset.ci.scripts.github_report --repo OWNER/NAME pr --head BRANCH [--base main] \
        --title TITLE --body-file report.md
    python -m patchset.ci.scripts.github_report --repo OWNER/NAME issue --state red|green \
        --title TITLE --body-file report.md [--label patchset-gate]

``pr``: the open pull request from ``BRANCH`` into ``--base`` gets the new title and body, or
one is opened. ``issue``: red opens the gate's issue (the open issue carrying ``--label``) or
updates its body and comments the new headline; green comments and closes it, when one is open.
One issue, one pull request, however many nights in a row.

The token comes from ``$GITHUB_TOKEN``; the API from ``--api`` or ``$GITHUB_API_URL`` (set by
GitHub Actions; GitHub Enterprise and a local GitHub-shaped server work the same way). Exit 0
done, 2 GitHub refused or could not be reached (one line on stderr).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from patchset.ci.scripts._common import main_guard, read_text, set_output
from patchset.errors import EnvironmentFailure, InputError
from patchset.text import terminal

MAX_BODY = 65_536  # GitHub refuses issue and pull request bodies longer than this
DEFAULT_LABEL = "patchset-gate"


@dataclass
class Done:
    """What the report script did on GitHub: opened, updated or closed a PR or issue (or nothing)."""

    kind: str  # pr | issue
    action: str  # opened | updated | closed | nothing
    number: int | None
    url: str = ""


def _body(text: str) -> str:
    if len(text) <= MAX_BODY:
        return text
    note = "\n\n(report cut to GitHub's size limit: the full report is in the run's artifacts)\n"
    return text[: MAX_BODY - len(note)] + note


def _headline(body: str) -> str:
    for line in body.splitlines():
        if line.strip():
            return line.lstrip("# ").strip()
    return "the gate ran again"


def connect(repo: str, api: str | None = None, token: str | None = None):
    """The PyGithub repository object (one GET)."""
    from github import Auth, Github, GithubException

    token = token or os.environ.get("GITHUB_TOKEN") or ""
    if not token:
        raise InputError("no GitHub token", hint="set GITHUB_TOKEN (in a workflow: secrets.GITHUB_TOKEN)")
    if "/" not in repo:
        raise InputError(f"--repo {repo!r}: expected OWNER/NAME")
    base = (api or os.environ.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/")
    gh = Github(base_url=base, auth=Auth.Token(token), retry=None, timeout=30)
    try:
        return gh.get_repo(repo)
    except GithubException as exc:
        raise EnvironmentFailure(f"GitHub answered {exc.status} for {repo}: {_message(exc)}") from None


def _message(exc) -> str:
    data = getattr(exc, "data", None)
    if isinstance(data, dict):
        return str(data.get("message", data))
    return str(data or exc)


def _guard(what: str):
    from github import GithubException

    class _G:
        def __enter__(self):
            return self

        def __exit__(self, et, ev, tb):
            if isinstance(ev, GithubException):
                raise EnvironmentFailure(f"{what}: GitHub answered {ev.status}: {_message(ev)}") from None
            if ev is not None and et.__module__.startswith(("requests", "urllib3")):
                raise EnvironmentFailure(f"{what}: {ev}") from None
            return False

    return _G()


def open_or_update_pr(repo, head: str, base: str, title: str, body: str) -> Done:
    owner = repo.owner.login
    with _guard(f"pull request {head} -> {base}"):
        for pr in repo.get_pulls(state="open", head=f"{owner}:{head}", base=base):
            pr.edit(title=title, body=_body(body))
            return Done("pr", "updated", pr.number, pr.html_url)
        pr = repo.create_pull(base=base, head=head, title=title, body=_body(body))
        return Done("pr", "opened", pr.number, pr.html_url)


def _open_issue(repo, label: str):
    for issue in repo.get_issues(state="open", labels=[label]):
        if issue.pull_request is None:  # the issues list also holds pull requests
            return issue
    return None


def report_issue(repo, state: str, title: str, body: str, label: str = DEFAULT_LABEL) -> Done:
    with _guard(f"the {label} issue"):
        issue = _open_issue(repo, label)
        if state == "red":
            if issue is None:
                issue = repo.create_issue(title=title, body=_body(body), labels=[label])
                return Done("issue", "opened", issue.number, issue.html_url)
            issue.edit(title=title, body=_body(body))
            issue.create_comment(f"Still red: {_headline(body)}")
            return Done("issue", "updated", issue.number, issue.html_url)
        if issue is None:
            return Done("issue", "nothing", None)
        issue.create_comment(f"Green again: {_headline(body)}")
        issue.edit(state="closed", state_reason="completed")
        return Done("issue", "closed", issue.number, issue.html_url)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m patchset.ci.scripts.github_report", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--repo", default=os.environ.get("GITHUB_REPOSITORY", ""), help="OWNER/NAME")
    ap.add_argument("--api", default=None, help="API base URL (default $GITHUB_API_URL or api.github.com)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pr")
    p.add_argument("--head", required=True)
    p.add_argument("--base", default="main")
    p.add_argument("--title", required=True)
    p.add_argument("--body-file", type=Path, required=True)
    i = sub.add_parser("issue")
    i.add_argument("--state", choices=("red", "green"), required=True)
    i.add_argument("--title", required=True)
    i.add_argument("--body-file", type=Path, required=True)
    i.add_argument("--label", default=DEFAULT_LABEL)
    args = ap.parse_args(argv)
    body = read_text(args.body_file)
    repo = connect(args.repo, args.api)
    if args.cmd == "pr":
        done = open_or_update_pr(repo, args.head, args.base, args.title, body)
    else:
        done = report_issue(repo, args.state, args.title, body, args.label)
    print(terminal(f"{done.kind} {done.action}" + (f" #{done.number} {done.url}" if done.number else "")))
    set_output(f"{done.kind}_action", done.action)
    set_output(f"{done.kind}_number", str(done.number or ""))
    return 0


if __name__ == "__main__":
    main_guard(main)
