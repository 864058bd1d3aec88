"""Network behaviour (issue #27, item 5): no network is found by the first request and said once
(DNS failure, a refused connection), every later request to that host is not made; the token
notice is said once and whole; network work past 2 s shows a progress line; ``--timeout`` bounds
a command's network time.

Real parts: a closed port on 127.0.0.1 refuses; ``api.github.invalid`` has no DNS answer (RFC 2606:
``.invalid`` never resolves); a slow local HTTP server (tests/support/slowhttp.py). DNS lookups are
counted by wrapping ``socket.getaddrinfo`` (the real one still answers).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import time
from pathlib import Path

import pytest

from tests.support.repo import REPO_ROOT
from tests.support.slowhttp import Reply, SlowServer


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def prod(tmp_path: Path, monkeypatch) -> Path:
    d = tmp_path / "prod"
    d.mkdir()
    shutil.copy(REPO_ROOT / "patches.toml", d / "patches.toml")
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no `gh`: no token
    return d


@pytest.fixture
def lookups(monkeypatch):
    """``{host: getaddrinfo calls}`` during the test."""
    seen: dict[str, int] = {}
    real = socket.getaddrinfo

    def counting(host, *args, **kwargs):
        seen[str(host)] = seen.get(str(host), 0) + 1
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", counting)
    return seen


def test_refused_status_refresh_asks_once_and_says_it_once(run, prod: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATCHSET_GITHUB_API", f"http://127.0.0.1:{closed_port()}/api/v3")
    t0 = time.monotonic()
    r = run("status", "--refresh", "--json", cwd=prod)
    took = time.monotonic() - t0
    assert r.code == 2, r
    data = json.loads(r.stdout)
    assert data["round_trips"] == 1  # the first request found it; the other 11 reads were not made
    assert len(data["errors"]) == 1, data["errors"]  # said once, for all 12 reads
    assert re.fullmatch(
        r"no network: 127\.0\.0\.1:\d+: connection refused: 12 upstream read\(s\) not made; "
        r"the rows show what was recorded",
        data["errors"][0],
    )
    assert took < 10, took  # was 13 s with 12 failing requests and their retries
    # the token notice: once, whole (never through the log as well)
    r = run("status", "--refresh", cwd=prod)
    both = r.stdout + r.stderr
    assert both.count("no GitHub token") == 1 and "without review decisions, CI states or follow-ups" in " ".join(
        both.split()
    )
    assert r.stdout.count("no network") == 1 + sum(1 for ln in r.stdout.splitlines() if "(no network:" in ln)
    assert sum(1 for ln in r.stdout.splitlines() if ln.startswith("error:")) == 1


def test_dns_failure_stops_fetch_all_after_one_lookup(run, prod: Path, monkeypatch, lookups) -> None:
    monkeypatch.setenv("PATCHSET_GITHUB_API", "http://api.github.invalid/api/v3")
    t0 = time.monotonic()
    r = run("fetch", "--all", "--json", cwd=prod)
    took = time.monotonic() - t0
    assert r.code == 2, r
    data = json.loads(r.stdout)
    failed = [row for row in data["rows"] if row["status"] == "failed"]
    assert len(failed) >= 20
    assert data["no_network"] == {"api.github.invalid: DNS lookup failed": len(failed)}
    assert lookups.get("api.github.invalid", 0) == 1  # was three per source (retries), 63 in all
    assert took < 10, took  # was 21 s
    r = run("fetch", "--all", cwd=prod)
    assert r.stdout.count("api.github.invalid: DNS lookup failed: ") == 1  # the summary, once


def test_slow_network_work_shows_progress_and_timeout_bounds_it(run, prod: Path, monkeypatch) -> None:
    """A GitHub that never finishes an answer: ``--timeout 3`` ends the refresh after ~3 s (not
    PATCHSET_NET_REQUEST_DEADLINE's 120 s), and past 2 s a progress line says what it waits for."""
    with SlowServer(default=Reply(body=b"{" + b" " * 500, interval=0.5)) as srv:
        monkeypatch.setenv("PATCHSET_GITHUB_API", srv.url + "/api/v3")
        monkeypatch.setenv("PATCHSET_PROGRESS", "1")
        t0 = time.monotonic()
        r = run("status", "--refresh", "--timeout", "3", "--json", cwd=prod)
        took = time.monotonic() - t0
    assert r.code == 2, r
    assert took < 15, took
    assert "network: GET /api/v3/repos/" in r.stderr and "from 127.0.0.1:" in r.stderr
    assert json.loads(r.stdout)["errors"]  # the rows say why, the page still renders
    r = run("status", "--refresh", "--timeout", "0", cwd=prod)
    assert r.code == 2 and "not a positive number of seconds" in r.stderr


def test_no_progress_when_the_network_is_quick(run, prod: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATCHSET_GITHUB_API", f"http://127.0.0.1:{closed_port()}/api/v3")
    monkeypatch.setenv("PATCHSET_PROGRESS", "1")
    r = run("status", "--refresh", cwd=prod)
    assert "network: " not in r.stderr


def test_no_network_reason_words() -> None:
    import requests

    from patchset.upstream import net
    from patchset.upstream.net import no_network_reason

    s = net.session()
    with pytest.raises(requests.exceptions.ConnectionError) as refused:
        s.get(f"http://127.0.0.1:{closed_port()}/", timeout=5)
    assert no_network_reason(refused.value) == "connection refused"
    with pytest.raises(requests.exceptions.ConnectionError) as dns:
        s.get("http://api.github.invalid/", timeout=5)
    assert no_network_reason(dns.value) == "DNS lookup failed"
    assert no_network_reason(requests.exceptions.ReadTimeout("slow")) is None
