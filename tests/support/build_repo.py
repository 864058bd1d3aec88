"""A maintainer's image-build repository made from the project's example bodies: per-target patch
folders (``patches/vllm/*.patch`` from ``examples/spark-sm12x``, ``patches/flashinfer/*.patch``
from ``examples/flashinfer-sm12x``) and an ``EXPECTED.sha256`` in installed paths, written from the
examples' own locks (hashes recorded when those examples were verified, not by the code under test).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tests.support.repo import REPO_ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXAMPLES = (("spark-sm12x", "vllm"), ("flashinfer-sm12x", "flashinfer"))


def example_build_repo(build: Path, extra_expected: tuple[str, ...] = ()) -> Path:
    """Lay the example bodies out as a build repository at ``build``; ``extra_expected`` adds
    EXPECTED.sha256 lines for paths no patch touches."""
    expected: list[str] = []
    for ex, target in EXAMPLES:
        src = REPO_ROOT / "examples" / ex
        (build / "patches" / target).mkdir(parents=True)
        for body in sorted((src / "patchset/series" / target).glob("*.patch")):
            shutil.copy(body, build / "patches" / target / body.name)
        locked = tomllib.loads((src / "patches.lock").read_text())["targets"][target]["files"]
        for path, digest in locked.items():
            installed = "flashinfer/data/" + path if path.startswith("include/") else path
            expected.append(f"{digest}  {installed}\n")
    expected += [f"{'0' * 64}  {p}\n" for p in extra_expected]
    (build / "EXPECTED.sha256").write_text("".join(expected))
    return build
