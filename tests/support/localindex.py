"""A package index on 127.0.0.1 that serves release files from a directory (PEP 691 JSON).

Tests (and offline mirrors) point ``PATCHSET_INDEX_URL`` at it to exercise the real download
path: HTTP, the JSON simple API, sha256 verification, caching. Where it differs from PyPI:
file URLs are relative to the project page (allowed by PEP 691, and PyPI's are absolute), only
the JSON form is served (no HTML), there are no ETags, ``upload-time`` or metadata files, and
``tamper`` can serve bytes that do not match the listed hash (to test verification) and
``listed_as`` can list a file under another ``filename`` than its own (a hostile index's answer).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def _project_of(filename: str) -> tuple[str, str] | None:
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
        elif filename.endswith((".tar.gz", ".zip")):
            name, version = parse_sdist_filename(filename)
        else:
            return None
    except (InvalidSdistFilename, InvalidWheelFilename):
        return None
    return str(name), str(version)


class LocalIndex:
    """Serve every sdist/wheel in ``root`` at ``http://127.0.0.1:<port>/simple/<project>/``."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.tamper: dict[str, bytes] = {}  # filename -> bytes served instead of the real ones
        self.yanked: set[str] = set()
        self.listed_as: dict[str, str] = {}  # filename -> the "filename" the listing claims instead
        self.requests: Counter[str] = Counter()  # path -> count
        self._hashes: dict[tuple[str, int, int], str] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("LocalIndex is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/simple"

    def start(self) -> LocalIndex:
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                index.requests[self.path] += 1
                parts = [unquote(p) for p in self.path.split("?")[0].split("/") if p]
                if len(parts) == 2 and parts[0] == "simple":
                    self._send(200, index.listing(parts[1]), JSON_TYPE)
                elif len(parts) == 2 and parts[0] == "files" and (index.root / parts[1]).is_file():
                    body = index.tamper.get(parts[1])
                    if body is None:
                        body = (index.root / parts[1]).read_bytes()
                    self._send(200, body, "application/octet-stream")
                else:
                    self._send(404, b"not found", "text/plain")

            def _send(self, code: int, body: bytes | None, ctype: str) -> None:
                if body is None:
                    code, body, ctype = 404, b"no such project", "text/plain"
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> LocalIndex:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _sha256(self, path: Path) -> str:
        st = path.stat()
        key = (path.name, st.st_size, st.st_mtime_ns)
        if key not in self._hashes:
            self._hashes[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        return self._hashes[key]

    def listing(self, project: str) -> bytes | None:
        """The PEP 691 JSON page of ``project``, or None when no file belongs to it."""
        want = canonicalize_name(project)
        files = []
        versions = set()
        for path in sorted(self.root.iterdir()):
            parsed = _project_of(path.name)
            if parsed is None or canonicalize_name(parsed[0]) != want:
                continue
            versions.add(parsed[1])
            files.append(
                {
                    "filename": self.listed_as.get(path.name, path.name),
                    "url": f"../../files/{path.name}",
                    "hashes": {"sha256": self._sha256(path)},
                    "size": path.stat().st_size,
                    "yanked": path.name in self.yanked,
                }
            )
        if not files:
            return None
        doc = {"meta": {"api-version": "1.1"}, "name": want, "files": files, "versions": sorted(versions)}
        return json.dumps(doc).encode()
