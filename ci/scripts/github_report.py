"""Open or update the gate's pull request (green) and its one issue (red), through PyGithub.

    python -m patchset.ci.scripts.github_report --repo OWNER/NAME pr --head BRANCH [--base main] \
        --title TITLE --body-file report.md
    python -m patchset.ci.scripts.github_report --repo OWNER/NAME issue --state red|green \
        --title TITLE --body-file report.md [--label patchset-gate]

One issue, one pull request, however many nights in a row: red opens or updates the issue
carrying ``--label``, green comments and closes it. The token comes from ``$GITHUB_TOKEN``, the
API from ``--api`` or ``$GITHUB_API_URL``. Exit 0 done, 2 GitHub refused or could not be reached.
Requests go through ``patchset.upstream.net`` (``_Connection``: deadlines, caps, one budget); what
is written is sanitised (``patchset.text``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from patchset.ci.scripts._common import main_guard, set_output
from patchset.errors import EnvironmentFailure, InputError
from patchset.text import Word, markdown_text, terminal
from patchset.upstream import net
from patchset.upstream.net import command_budget

MAX_BODY = 65_536  # GitHub refuses issue and pull request bodies longer than this
MAX_TITLE = 256  # and titles longer than this
DEFAULT_LABEL = "patchset-gate"


class DoneKind(Word):
    """What the report script opened, updated or closed."""

    PR = "pr"
    ISSUE = "issue"


class Action(Word):
    """What it did to it."""

    OPENED = "opened"
    UPDATED = "updated"
    CLOSED = "closed"
    NOTHING = "nothing"


@dataclass
class Done:
    """What the report script did on GitHub: opened, updated or closed a PR or issue (or nothing)."""

    kind: DoneKind
    action: Action
    number: int | None
    url: str = ""


def _body(text: str) -> str:
    """The report as an issue or PR body: control and bidi characters shown (``\\x1b``,
    ``<U+202E>``), newlines and tabs kept; cut to GitHub's limit outside any code fence."""
    text = terminal(text, block=True)
    if len(text) <= MAX_BODY:
        return text
    note = "\n\n(report cut to GitHub's size limit: the full report is in the run's artifacts)\n"
    kept = text[: MAX_BODY - len(note) - 8]
    if sum(1 for line in kept.splitlines() if line.lstrip().startswith("```")) % 2:
        kept += "\n```"  # the cut fell inside a code block: close it, so the note is text
    return kept + note


def _title(text: str) -> str:
    """One line of plain text (controls and newlines shown), within GitHub's limit."""
    return terminal(text)[:MAX_TITLE]


def _headline(body: str) -> str:
    """The report's first line, as plain Markdown text (no link, HTML or mention markup of its own)."""
    for line in body.splitlines():
        if line.strip():
            return markdown_text(line.lstrip("# ").strip())
    return "the gate ran again"


class _Response:
    """An answer of ``net.request`` in the shape PyGithub reads (``status``, ``getheaders``, ``read``)."""

    def __init__(self, answer: net.Answer) -> None:
        self.status = answer.status
        self.headers = answer.headers
        self._body = answer.body

    def getheaders(self):
        return self.headers.items()

    def read(self) -> str:
        return self._body.decode("utf-8", "replace")


class _Connection:
    """PyGithub's connection (what ``Requester`` makes per host) over ``patchset.upstream.net``:
    every request within net's timeouts, deadline, answer cap and the script's budget."""

    protocol = "https"

    def __init__(self, host: str, port: int | None = None, strict: bool = False, timeout=None, **kwargs) -> None:
        self.host = host
        self.port = port or (443 if self.protocol == "https" else 80)
        self.verify = kwargs.get("verify", True)
        self._session = net.session(trust_env=False)
        self._args: tuple = ("GET", "/", None, {})

    def request(self, verb: str, url: str, input, headers: dict[str, str], stream: bool = False) -> None:
        self._args = (verb, url, input, headers)

    def getresponse(self) -> _Response:
        verb, url, data, headers = self._args
        answer = net.request(
            self._session,
            verb,
            f"{self.protocol}://{self.host}:{self.port}{url}",
            what=f"{verb} {url.split('?', 1)[0]}",
            data=data,
            headers=headers,
            verify=self.verify,
            allow_redirects=False,
        )
        return _Response(answer)

    def close(self) -> None:
        self._session.close()


class _HTTPConnection(_Connection):
    protocol = "http"


def _github(base: str, token: str):
    """A ``Github`` whose requester speaks through ``_Connection``: PyGithub's class-wide hook is
    set only while this one object is made (its requester keeps the classes it was made with)."""
    from github import Auth, Github
    from github.Requester import Requester

    Requester.injectConnectionClasses(_HTTPConnection, _Connection)  # type: ignore[arg-type]
    try:
        return Github(base_url=base, auth=Auth.Token(token), retry=None, timeout=30)
    finally:
        Requester.resetConnectionClasses()


def connect(repo: str, api: str | None = None, token: str | None = None):
    """The PyGithub repository object (one GET)."""
    token = token or os.environ.get("GITHUB_TOKEN") or ""
    if not token:
        raise InputError("no GitHub token", hint="set GITHUB_TOKEN (in a workflow: secrets.GITHUB_TOKEN)")
    if "/" not in repo:
        raise InputError(f"--repo {repo!r}: expected OWNER/NAME")
    base = (api or os.environ.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/")
    gh = _github(base, token)
    with _guard(f"repository {repo}"):
        return gh.get_repo(repo)


def _message(exc) -> str:
    data = getattr(exc, "data", None)
    if isinstance(data, dict):
        return str(data.get("message", data))
    return str(data or exc)


@contextlib.contextmanager
def _guard(what: str) -> Iterator[None]:
    from github import GithubException

    try:
        yield
    except GithubException as ev:
        raise EnvironmentFailure(f"{what}: GitHub answered {ev.status}: {_message(ev)}") from None
    except Exception as ev:
        if type(ev).__module__.startswith(("requests", "urllib3")):
            raise EnvironmentFailure(f"{what}: {ev}") from None
        raise


def open_or_update_pr(repo, head: str, base: str, title: str, body: str) -> Done:
    owner = repo.owner.login
    with _guard(f"pull request {head} -> {base}"):
        for pr in repo.get_pulls(state="open", head=f"{owner}:{head}", base=base):
            pr.edit(title=_title(title), body=_body(body))
            return Done(DoneKind.PR, Action.UPDATED, pr.number, pr.html_url)
        pr = repo.create_pull(base=base, head=head, title=_title(title), body=_body(body))
        return Done(DoneKind.PR, Action.OPENED, pr.number, pr.html_url)


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
                issue = repo.create_issue(title=_title(title), body=_body(body), labels=[label])
                return Done(DoneKind.ISSUE, Action.OPENED, issue.number, issue.html_url)
            issue.edit(title=_title(title), body=_body(body))
            issue.create_comment(f"Still red: {_headline(body)}")
            return Done(DoneKind.ISSUE, Action.UPDATED, issue.number, issue.html_url)
        if issue is None:
            return Done(DoneKind.ISSUE, Action.NOTHING, None)
        issue.create_comment(f"Green again: {_headline(body)}")
        issue.edit(state="closed", state_reason="completed")
        return Done(DoneKind.ISSUE, Action.CLOSED, issue.number, issue.html_url)


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
    body = args.body_file.read_text(encoding="utf-8")
    with command_budget():  # every request of the script together: $PATCHSET_NET_COMMAND_DEADLINE
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
