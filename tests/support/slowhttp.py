"""An HTTP server on 127.0.0.1 that answers slowly on purpose: headers at once, then the body one
byte every ``interval`` seconds (or the headers themselves byte by byte).

It exists for the network-deadline tests: each byte arrives well within any per-read timeout, so
only a total deadline per request (or per command) ends such a download. ``routes`` maps a path
(without the query string) to a ``Reply``; ``default`` answers the rest. The server stops its
trickling handlers when it is stopped or when the client goes away, so a test never leaves a
thread writing after it ends.

    with SlowServer({"/simple/demo-pkg/": Reply(body=listing, interval=1.0)}) as srv:
        os.environ["PATCHSET_INDEX_URL"] = srv.url + "/simple"
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    """One answer. ``fast``: how many body bytes go out at once before the trickle starts;
    ``interval``: seconds between the trickled bytes (0: the whole body at once);
    ``trickle_headers``: send the status line and headers byte by byte too; ``length=False``:
    no Content-Length (the body ends when the connection closes)."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    interval: float = 0.0
    fast: int = 0
    trickle_headers: bool = False
    length: bool = True


class SlowServer:
    """Serve ``routes`` (path -> Reply) at ``http://127.0.0.1:<port>``; ``default`` for the rest."""

    def __init__(self, routes: dict[str, Reply] | None = None, default: Reply | None = None) -> None:
        self.routes = dict(routes or {})
        self.default = default or Reply(status=404, body=b"not found", content_type="text/plain")
        self.requests: Counter[str] = Counter()  # path -> count
        self.bytes_sent = 0
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("SlowServer is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> SlowServer:
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                self._answer()

            def _answer(self) -> None:
                path = self.path.split("?")[0]
                with srv._lock:
                    srv.requests[path] += 1
                reply = srv.routes.get(path, srv.default)
                length = f"Content-Length: {len(reply.body)}\r\n" if reply.length else "Connection: close\r\n"
                head = (
                    f"HTTP/1.1 {reply.status} X\r\nContent-Type: {reply.content_type}\r\n"
                    + length
                    + "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
                    + "\r\n"
                ).encode("latin-1")
                try:
                    if reply.trickle_headers:
                        self._trickle(head, reply.interval or 1.0)
                    else:
                        self.wfile.write(head)
                        self.wfile.flush()
                    self.wfile.write(reply.body[: reply.fast])
                    self.wfile.flush()
                    self._sent(min(reply.fast, len(reply.body)))
                    if reply.interval:
                        self._trickle(reply.body[reply.fast :], reply.interval)
                    else:
                        self.wfile.write(reply.body[reply.fast :])
                        self._sent(len(reply.body[reply.fast :]))
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up: what the tests want
                self.close_connection = True

            def _trickle(self, data: bytes, interval: float) -> None:
                for i in range(len(data)):
                    if srv._stop.wait(interval):
                        return
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    self._sent(1)

            def _sent(self, n: int) -> None:
                with srv._lock:
                    srv.bytes_sent += n

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> SlowServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
