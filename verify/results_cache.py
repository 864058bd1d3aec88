"""The result cache of ``verify``: engine-test results by (tree content, test, engine).

An engine start costs a minute on a laptop and up to an hour on the cluster, and most re-runs ask
what the last run answered. A result is stored under the sha256 of the tree's content (known from
a dry run), the test (kind, checks, parameters, model files) and the engine (its resolved
definition and the scripts its commands name), so a re-run on unchanged trees starts no engine.
Only measured results are kept, never an error. An unreadable or malformed entry is a miss; an
entry without this installation's seal (``patchset.sealed``, kind ``verify result``) is ignored,
re-measured and listed in :attr:`ResultCache.ignored` (docs/engines.md, docs/security.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from patchset import atomic
from patchset.errors import ForeignState
from patchset.sealed import read_sealed, sealed_json

VERSION = 2  # 2: entries are sealed (entries of 1 live under other keys: a plain miss)
KIND = "verify result"
MAX_ENTRY = 4 * 1024 * 1024  # bytes: a serving result with every sample is a few KB
SKIP_PARTS = frozenset({"__pycache__", ".git", ".patchset-txn"})


def base_fingerprint(base: Path, marker: str | None = None) -> str:
    """The base tree's identity: its marker (a release unpacked from the index) or its content."""
    h = hashlib.sha256(f"patchset-verify-base {VERSION}\0".encode())
    if marker is not None:
        h.update(marker.encode())
        return h.hexdigest()
    root = str(base)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_PARTS)
        rel_dir = os.path.relpath(dirpath, root)
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            p = os.path.join(dirpath, name)
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
            try:
                if os.path.islink(p):
                    h.update(b"link:" + os.readlink(p).encode("utf-8", "surrogateescape"))
                else:
                    with open(p, "rb") as fh:
                        while chunk := fh.read(1 << 20):
                            h.update(chunk)
            except OSError:
                h.update(b"<unreadable>")
            h.update(b"\0")
    return h.hexdigest()


def tree_hash(base_fp: str, files: Mapping[str, str | None], modes: Mapping[str, int | None] | None = None) -> str:
    """A patched tree's content: the base's fingerprint and every written file's digest and mode."""
    h = hashlib.sha256(base_fp.encode() + b"\0")
    for path in sorted(files):
        mode = (modes or {}).get(path)
        h.update(f"{path}\0{files[path] or '<deleted>'}\0{mode if mode is not None else ''}\0".encode())
    return h.hexdigest()


def result_key(tree: str, test: str, engine: tuple) -> str:
    data = json.dumps({"v": VERSION, "tree": tree, "test": test, "engine": list(engine)}, sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()


class ResultCache:
    """Engine-test results on disk. ``enabled=False`` reads nothing and writes nothing."""

    def __init__(self, root: Path | None, *, enabled: bool = True) -> None:
        self.root = root
        self.enabled = enabled and root is not None
        self.ignored: list[str] = []  # entries not sealed by this installation: ignored, re-measured

    def _path(self, key: str) -> Path:
        assert self.root is not None
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        path = self._path(key)
        try:
            doc = read_sealed(path, KIND, what="a cached verify result", hint="", max_bytes=MAX_ENTRY)
        except ForeignState:
            if str(path) not in self.ignored:
                self.ignored.append(str(path))
            return None
        except OSError:
            return None
        if doc is None or doc.get("version") != VERSION or doc.get("key") != key:
            return None
        result = doc.get("result")
        if not isinstance(result, dict):
            return None
        result["_measured_at"] = str(doc.get("measured_at", ""))[:40]
        return result

    def put(self, key: str, result: dict[str, Any]) -> None:
        if not self.enabled:
            return
        doc = {
            "version": VERSION,
            "key": key,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "result": result,
        }
        try:
            # through JSON first: the seal is made over what a reader will load
            doc = json.loads(json.dumps(doc, allow_nan=False, default=str))
            data = sealed_json(KIND, doc, keep_order=True)  # a result's tables in the order measured
        except ValueError:  # a NaN or an infinity: not worth keeping
            return
        if len(data) > MAX_ENTRY:
            return
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(path, data)
        except OSError:
            pass  # a full disk costs the next run an engine start, not this run its result
