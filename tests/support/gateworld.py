"""A small upstream with squash-merge history and a two-patch ledger on it: the gate's test world.

Shared by the gate tests and the workflow tests (the ``upstream`` fixture in ``tests/conftest.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.repo import commit_files, git
from tests.support.text import edit, udiff

CORE = "".join(f"def limit_{i}(x):\n    return x + {i}\n\n" for i in range(20))
UTIL = "".join(f"VALUE_{i} = {i}\n" for i in range(40))


PATCH_A = ("pkg/util.py", "VALUE_30 = 30\n", "VALUE_30 = 30  # PATCHED-A\n")
PATCH_B = ("pkg/core.py", "def limit_5(x):\n    return x + 5\n", "def limit_5(x):\n    return min(x, 5)  # PATCHED-B\n")


def build_upstream(root: Path) -> tuple[Path, list[str]]:
    """``(repo, [c0 .. c9])``: a linear main branch with squash-merge subjects, under ``root``."""
    repo = root / "demo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    core, util = CORE, UTIL
    shas = [commit_files(repo, "Initial import (#100)", {"pkg/core.py": core, "pkg/util.py": util, "README": "demo\n"})]
    util = edit(util, "VALUE_3 = 3\n", "VALUE_3 = 33\n")
    shas.append(commit_files(repo, "Tune VALUE_3 (#101)", {"pkg/util.py": util}))
    util = edit(util, PATCH_A[1], PATCH_A[2])
    shas.append(commit_files(repo, "Take the downstream VALUE_30 note (#102)", {"pkg/util.py": util}))
    shas.append(commit_files(repo, "Docs (#103)", {"README": "demo, documented\n"}))
    core = edit(
        core,
        "def limit_5(x):\n    return x + 5\n",
        "def limit_5(x, cap=None):\n    return x + 5 if cap is None else cap\n",
    )
    shas.append(commit_files(repo, "[Core] Rework limit_5 with a cap (#104)", {"pkg/core.py": core}))
    for n in range(105, 110):
        shas.append(commit_files(repo, f"Unrelated change {n} (#{n})", {f"docs/n{n}.md": f"{n}\n"}))
    return repo, shas


def transient_upstream(root: Path) -> tuple[Path, list[str]]:
    """c0 base; c3 breaks A's context, c5 puts it back and breaks B; c6 is judged: A replays on
    c6 but not on c3/c4, so the commit below B's first bad one is not safe."""
    repo = root / "demo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    util, core = UTIL, CORE
    c = [commit_files(repo, "Initial import (#100)", {"pkg/core.py": core, "pkg/util.py": util})]
    c.append(commit_files(repo, "Docs (#101)", {"README": "1\n"}))
    c.append(commit_files(repo, "Docs (#102)", {"README": "2\n"}))
    broken = edit(util, "VALUE_29 = 29\n", "VALUE_29 = 2900\n")
    c.append(commit_files(repo, "Retune VALUE_29 (#103)", {"pkg/util.py": broken}))
    c.append(commit_files(repo, "Docs (#104)", {"README": "4\n"}))
    core = edit(core, PATCH_B[1], "def limit_5(x, cap=None):\n    return x + 5 if cap is None else cap\n")
    c.append(commit_files(repo, "Revert #103; rework limit_5 (#105)", {"pkg/util.py": util, "pkg/core.py": core}))
    c.append(commit_files(repo, "Docs (#106)", {"README": "6\n"}))
    return repo, c


def gate_ledger(root: Path, upstream_repo: Path, base: str, tests: str = "") -> Path:
    """A ledger with patches A and B in ``root/ledgers/demo`` of a git repository ``root``."""
    d = root / "ledgers" / "demo"
    series = d / "patchset" / "series" / "demo"
    series.mkdir(parents=True)
    for name, (path, old, new) in (("A", PATCH_A), ("B", PATCH_B)):
        text = CORE if path == "pkg/core.py" else UTIL
        (series / f"{name}.patch").write_bytes(udiff(path, text, edit(text, old, new)).encode())
    (d / "patches.toml").write_text(f"""schema = 1

[targets.demo]
upstream = "{upstream_repo}"
github = "example/demo"
base = "{base}"

[[patch]]
id = "A"
target = "demo"
title = "A note on VALUE_30"
origin = "ours"
files = ["pkg/util.py"]

[[patch.tests]]
name = "util-patched"
command = "grep -q PATCHED-A pkg/util.py"
tags = ["cpu"]

[[patch]]
id = "B"
target = "demo"
title = "limit_5 caps at 5"
origin = "ours"
files = ["pkg/core.py"]

[[patch.tests]]
name = "core-patched"
command = "{sys.executable} -c \\"import sys; sys.exit('PATCHED-B' not in open('pkg/core.py').read())\\""
tags = ["cpu", "gpu"]
{tests}""")
    if not (root / ".git").exists():
        git(root, "init", "-q", "-b", "main")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "ledger")
    return d / "patches.toml"


def sdist(dest: Path, version: str, files: dict[str, str]) -> Path:
    """The sdist ``demo-<version>.tar.gz`` of ``files`` in ``dest`` (fixed mtimes: the same bytes each time)."""
    import io
    import tarfile

    path = dest / f"demo-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"demo-{version}/{rel}")
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return path


def release_ledger(tmp_path: Path) -> Path:
    """A ledger of patch B on the package ``demo``'s release 1.0 (its upstream: the release history)."""
    d = tmp_path / "led"
    (d / "patchset/series/demo").mkdir(parents=True)
    (d / "patchset/series/demo/B.patch").write_bytes(
        udiff("pkg/core.py", CORE, edit(CORE, PATCH_B[1], PATCH_B[2])).encode()
    )
    (d / "patches.toml").write_text(
        'schema = 1\n\n[targets.demo]\nupstream = "https://example.invalid/demo.git"\n'
        'github = "example/demo"\nbase = "1.0"\npackage = "demo"\n\n[[patch]]\nid = "B"\n'
        'target = "demo"\ntitle = "B"\norigin = "ours"\n'
    )
    return d
