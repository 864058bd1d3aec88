"""Hypothesis strategies for what a hostile or broken GitHub (or a tampered state cache) can send:
text with controls, bidi overrides, Markdown and HTML; dates, shas, numbers, enums and flags that
are sometimes right and sometimes anything at all (wrong types included).

Used by tests/test_fuzz_github.py; each field strategy draws a valid value often enough that
whole answers parse, so the renderers see hostile *accepted* data too, not only rejected rows.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from hypothesis import strategies as st

# Pieces a terminal, a Markdown renderer, an HTML page or an XML parser could act on.
NASTY = [
    "\x00",
    "\x07",
    "\x08",
    "\x1b",
    "\x7f",
    "\x85",
    "\x9b",
    "\r",
    "\n",
    "\t",
    "\x0b",
    "\u061c",
    "\u200f",
    "\u202a",
    "\u202e",
    "\u2066",
    "\u2069",
    "\u2028",
    "\ud800",
    "\udcff",
    "\ufffe",
    "\uffff",
    "|",
    "\\",
    "`",
    "``",
    "*",
    "_",
    "~",
    "[",
    "]",
    "(",
    ")",
    "<",
    ">",
    "&",
    "#",
    "!",
    "-",
    "1.",
    " ",
    "\x1b]0;owned\x07",
    "\x1b]8;;https://evil.example/\x1b\\",
    "\x1b[31m",
    "\x1b[2J",
    "<img src=x onerror=alert(1)>",
    "<script>alert(1)</script>",
    "</td></tr><tr><td>",
    "[x](javascript:alert(1))",
    "![x](javascript:alert(1))",
    "<javascript:alert(1)>",
    "&#x202E;",
    "&lt;",
    "javascript:",
    "https://",
    "]]>",
    "<!--",
]

text = st.one_of(
    st.text(max_size=30),
    st.lists(st.one_of(st.sampled_from(NASTY), st.text(max_size=4)), max_size=10).map("".join),
)
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    text,
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _iso(d: dt.datetime) -> str:
    return d.strftime("%Y-%m-%dT%H:%M:%SZ")


good_date = st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2099, 12, 31)).map(_iso)
bad_date = st.one_of(
    st.sampled_from(["2026-13-45T99:00:00Z", "2026-02-30T10:00:00Z", "yesterday", "2026-10-01", "2026-10-01T10:00:00"]),
    text,
)
sha = st.text("0123456789abcdef", min_size=40, max_size=40)
bad_sha = st.one_of(st.sampled_from(["HEAD", "--output=/tmp/x", "a" * 39, "A" * 40, "g" * 40]), text)
good_url = st.sampled_from(["https://github.com/acme/demo/pull/1", "http://127.0.0.1:9/acme/demo/pull/1"])
bad_url = st.one_of(
    st.sampled_from(["javascript:alert(1)", "JaVaScRiPt:alert(1)", "data:text/html,<b>x</b>", "//evil", "https:evil"]),
    text,
)


def often(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly ``good`` (so whole answers still parse), sometimes ``bad``, sometimes any JSON junk."""
    return st.one_of(good, good, good, bad, junk)


def graphql_pull(number: int = 1) -> st.SearchStrategy[dict[str, Any]]:
    """A GraphQL ``pullRequest`` node (``tracker.github.graphql.PR_FIELDS``)."""
    state = often(st.sampled_from(["OPEN", "CLOSED", "MERGED"]), st.sampled_from(["open", "REOPENED", "DRAFT"]))
    return st.fixed_dictionaries(
        {
            "number": often(st.just(number), st.sampled_from([number + 1, str(number), True, float(number)])),
            "title": often(text, junk),
            "url": often(good_url, bad_url),
            "state": state,
            "isDraft": often(st.booleans(), st.sampled_from(["false", 0, 1])),
            "merged": often(st.booleans(), st.sampled_from(["true", 1])),
            "mergedAt": often(st.one_of(st.none(), good_date), bad_date),
            "closedAt": often(st.one_of(st.none(), good_date), bad_date),
            "updatedAt": often(good_date, bad_date),
            "author": often(st.one_of(st.none(), st.fixed_dictionaries({"login": text})), junk),
            "mergeCommit": often(st.one_of(st.none(), st.fixed_dictionaries({"oid": sha})), bad_sha),
            "headRefOid": often(sha, bad_sha),
            "reviewDecision": often(st.sampled_from([None, "APPROVED", "CHANGES_REQUESTED", "REVIEW_REQUIRED"]), text),
            "commits": often(
                st.fixed_dictionaries(
                    {
                        "nodes": st.lists(
                            st.fixed_dictionaries(
                                {
                                    "commit": st.fixed_dictionaries(
                                        {
                                            "oid": sha,
                                            "statusCheckRollup": st.one_of(
                                                st.none(),
                                                st.fixed_dictionaries(
                                                    {"state": often(st.sampled_from(["SUCCESS", "FAILURE"]), text)}
                                                ),
                                            ),
                                        }
                                    )
                                }
                            ),
                            max_size=1,
                        )
                    }
                ),
                junk,
            ),
        }
    )


def rest_pull(number: int = 1) -> st.SearchStrategy[dict[str, Any]]:
    """A REST ``GET /repos/{o}/{r}/pulls/{n}`` body (the fields the client reads)."""
    return st.fixed_dictionaries(
        {
            "number": often(st.just(number), st.sampled_from([number + 1, str(number), None])),
            "title": often(text, junk),
            "user": often(st.one_of(st.none(), st.fixed_dictionaries({"login": text})), junk),
            "state": often(st.sampled_from(["open", "closed"]), st.sampled_from(["OPEN", "merged"])),
            "draft": often(st.booleans(), junk),
            "merged": often(st.booleans(), junk),
            "merged_at": often(st.one_of(st.none(), good_date), bad_date),
            "merge_commit_sha": often(st.one_of(st.none(), sha), bad_sha),
            "head": often(st.fixed_dictionaries({"sha": sha}), junk),
            "updated_at": often(good_date, bad_date),
            "closed_at": often(st.one_of(st.none(), good_date), bad_date),
            "html_url": often(good_url, bad_url),
        }
    )


def recorded_entry(number: int = 1) -> st.SearchStrategy[dict[str, Any]]:
    """A state as the client records it (``PRState.to_json()``), fields sometimes tampered with."""
    state = st.sampled_from(["open", "closed", "merged"])
    return st.fixed_dictionaries(
        {
            "ref": often(
                st.just({"repo": "acme/demo", "number": number, "kind": "pr"}),
                st.sampled_from(
                    [
                        {"repo": "acme/demo", "number": number + 1, "kind": "pr"},
                        {"repo": "../etc", "number": number, "kind": "pr"},
                        {"repo": "acme/demo", "number": "x", "kind": "pr"},
                        {"repo": "acme/demo", "number": number, "kind": "gist"},
                    ]
                ),
            ),
            "title": often(text, junk),
            "author": often(st.one_of(st.none(), text), junk),
            "state": often(state, text),
            "draft": often(st.booleans(), junk),
            "merged": st.booleans(),
            "merged_at": often(st.one_of(st.none(), good_date), bad_date),
            "merge_commit": often(st.one_of(st.none(), sha), bad_sha),
            "head_sha": often(st.one_of(st.none(), sha), bad_sha),
            "updated_at": often(st.one_of(st.none(), good_date), bad_date),
            "closed_at": often(st.one_of(st.none(), good_date), bad_date),
            "review_decision": often(st.sampled_from([None, "APPROVED"]), text),
            "ci": often(st.sampled_from([None, "SUCCESS", "PENDING"]), text),
            "url": often(st.one_of(st.none(), good_url), bad_url),
            "is_pull": often(st.just(True), junk),
            "state_reason": often(st.none(), text),
            "source": often(st.just("network"), junk),
            "fetched_at": often(st.floats(min_value=0, max_value=2e9), junk),
            "age_s": often(st.none(), junk),
        }
    ).map(_consistent)


def _consistent(d: dict[str, Any]) -> dict[str, Any]:
    """Half the time make ``merged`` agree with ``state`` (so entries are accepted, and rendered)."""
    if d["merged"]:
        d["state"] = "merged" if d["state"] in ("open", "closed", "merged") else d["state"]
    elif d["state"] == "merged":
        d["state"] = "closed"
    return d
