"""Serve exchanges recorded against the real api.github.com (PyGithub's ``tests/ReplayData``) on
127.0.0.1, so the tracker's client can be tested on payloads GitHub really sent.

PyGithub's source distribution records each exchange as ten lines (scheme, verb, host, port,
path with query, request headers, request body, status, response headers, response body) with
a blank line between exchanges. The files are read from the cache ``specs.replay_dir`` fills;
nothing is copied into this repository.

Where this differs from GitHub: it answers only what was recorded, and a recorded request
without a query string also answers the same path with any query (the client always sends
``?ref=``); ``https://api.github.com`` in ``Location`` and ``Link`` headers is rewritten to this
server; ETags are replayed but a conditional request is never answered 304.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

GITHUB_API = "https://api.github.com"
_DROP = {"transfer-encoding", "content-length", "content-encoding", "connection", "status"}


@dataclass
class Exchange:
    source: str  # the ReplayData file
    verb: str
    host: str
    url: str  # path and query as sent
    status: int
    headers: list[tuple[str, str]]
    body: str

    @property
    def path(self) -> str:
        return urlsplit(self.url).path

    @property
    def query(self) -> str:
        return urlsplit(self.url).query

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


def read_exchanges(path: Path) -> list[Exchange]:
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    out: list[Exchange] = []
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        chunk = lines[i : i + 10]
        i += 10
        if len(chunk) < 10 or chunk[0] not in ("http", "https"):
            break  # not the ten-line form this reader knows: stop at what was read
        try:
            headers = [(str(k), str(v)) for k, v in ast.literal_eval(chunk[8])]
            status = int(chunk[7])
        except (ValueError, SyntaxError, TypeError):
            continue
        out.append(Exchange(path.name, chunk[1], chunk[2], chunk[4], status, headers, chunk[9]))
    return out


def all_exchanges(replay_dir: Path) -> list[Exchange]:
    out: list[Exchange] = []
    for f in sorted(replay_dir.glob("*.txt")):
        out += read_exchanges(f)
    return out


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


class ReplayServer:
    """``with ReplayServer(exchanges) as r: GitHubClient(base_url=r.base_url, ...)``."""

    def __init__(self, exchanges: Iterable[Exchange]) -> None:
        self.by_url: dict[tuple[str, str], Exchange] = {}
        self.by_path: dict[tuple[str, str], Exchange] = {}
        for e in exchanges:
            if e.host != "api.github.com":
                continue
            self.by_url.setdefault((e.verb, e.url), e)
            if not e.query:
                self.by_path.setdefault((e.verb, e.path), e)
        self.served: list[tuple[str, str, int]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def root(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def base_url(self) -> str:
        return self.root + "/api/v3"

    def answer(self, verb: str, target: str) -> tuple[int, list[tuple[str, str]], bytes]:
        rel = target.removeprefix("/api/v3")
        e = self.by_url.get((verb, rel)) or self.by_path.get((verb, urlsplit(rel).path))
        if e is None:
            self.served.append((verb, rel, 404))
            return 404, [("Content-Type", "application/json")], b'{"message":"Not Found (not recorded)"}'
        headers = []
        for k, v in e.headers:
            if k.lower() in _DROP:
                continue
            if k.lower() in ("location", "link"):
                v = v.replace(GITHUB_API, self.base_url)
            headers.append((k, v))
        self.served.append((verb, rel, e.status))
        return e.status, headers, e.body.encode("utf-8") if e.body != "None" else b""

    def __enter__(self) -> ReplayServer:
        replay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 10  # a kept-alive connection the client never closes ends by itself

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                status, headers, body = replay.answer(self.command, self.path)
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
