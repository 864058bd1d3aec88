"""A small upstream made for the fetch and status tests: a real git repository of a tiny project,
patches written against it as real ``git diff`` output, served by the local GitHub-shaped server
(``tests.support.fakehub``) as pull requests, a commit and a file in another repository, and a ledger
that names them.

Nothing here is copied from a real project: the files and changes are made up, small, and
applied in series order with zero fuzz.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.repo import commit_files, git, new_repo

TOKEN = "ghp_fetchWorldToken000000000000000000000"
REPO = "acme/demo"
OTHER = "acme/patches"


def _lines(tag: str, n: int) -> str:
    return "".join(f"{tag}_{i} = {i}\n" for i in range(1, n + 1))


BASE_FILES = {
    "demo/core.py": '"""core"""\n' + _lines("core", 20),
    "demo/util.py": '"""util"""\n' + _lines("util", 12),
    "tests/test_core.py": "import demo.core\n\n\ndef test_one():\n    assert demo.core.core_1 == 1\n",
    "README.md": "demo\n",
}


def _edit(root: Path, path: str, old: str, new: str) -> None:
    f = root / path
    text = f.read_text()
    assert old in text, (path, old)
    f.write_text(text.replace(old, new, 1))


@dataclass
class World:
    """The upstream repository (``git`` work tree), its commits and the diffs the patches are."""

    root: Path
    base: str = ""
    diffs: dict[str, str] = field(default_factory=dict)
    commit_sha: str = ""  # the upstream commit the "commit" source names (a real git sha)
    final: dict[str, str] = field(default_factory=dict)  # file -> content after the series

    def files_at(self, rev: str) -> dict[str, bytes]:
        out = {}
        for path in git(self.root, "ls-tree", "-r", "--name-only", rev).split():
            out[path] = subprocess.run(
                ["git", "show", f"{rev}:{path}"], cwd=self.root, check=True, capture_output=True
            ).stdout
        return out


def build_world(tmp: Path) -> World:
    """base -> p101 (core.py + its test) -> p102 (util.py) -> commit (new extra.py) -> file patch
    (core.py again, further down). Each diff is ``git diff`` of consecutive states."""
    root = tmp / "upstream"
    w = World(root, base=new_repo(root, BASE_FILES))
    git(root, "tag", "v1.0.0")

    def step(name: str, change) -> str:
        before = git(root, "rev-parse", "HEAD").strip()
        change()
        after = commit_files(root, name)
        w.diffs[name] = git(root, "diff", before, after)
        return after

    step(
        "p101",
        lambda: (
            _edit(root, "demo/core.py", "core_3 = 3\n", "core_3 = 30  # fixed upstream\n"),
            _edit(root, "tests/test_core.py", "== 1\n", "== 1\n    assert demo.core.core_3 == 30\n"),
        ),
    )
    step("p102", lambda: _edit(root, "demo/util.py", "util_6 = 6\n", "util_6 = 60\nutil_6b = 61\n"))
    w.commit_sha = step("commit", lambda: (root / "demo" / "extra.py").write_text("EXTRA = True\n"))
    step("file", lambda: _edit(root, "demo/core.py", "core_17 = 17\n", "core_17 = 170\n"))
    # the tree after the series as fetched: the test change of p101 is filtered out
    w.final = {p: d.decode() for p, d in w.files_at("HEAD").items()}
    w.final["tests/test_core.py"] = BASE_FILES["tests/test_core.py"]
    return w


def hub_data(w: World) -> dict:
    """The fakehub state: #101 (diff), #102 (too large for the diff media type: 406), the commit,
    and the other repository holding a patch file."""
    return {
        "tokens": [TOKEN],
        "repos": {
            REPO: {
                "pulls": {
                    "101": {
                        "title": "Fix core_3",
                        "author": "alice",
                        "diff": w.diffs["p101"],
                        "review_decision": "APPROVED",
                        "ci": "SUCCESS",
                    },
                    "102": {"title": "Widen util_6", "author": "bob", "diff": w.diffs["p102"], "diff_too_large": True},
                },
                "commits": {
                    w.commit_sha: {
                        "message": "Add extra",
                        "author": "carol",
                        "parents": [w.base],
                        "diff": w.diffs["commit"],
                    }
                },
            },
            OTHER: {"contents": {"main": {"series/04-core-17.patch": w.diffs["file"]}}},
        },
    }


LEDGER = """\
# an example ledger for the fetch tests
schema = 1
title = "demo"

[targets.demo]
upstream = "https://example.invalid/acme/demo.git"
github = "acme/demo"
base = "{base}"
strip = 1

[[patch]]
id = "u101-core3"
target = "demo"
title = "Fix core_3"
origin = "upstream"
authors = ["alice"]
[patch.upstream]
prs = ["acme/demo#101"]
[patch.source]
kind = "pr"
ref = "acme/demo#101"
include = ["demo/**"]
[patch.status]
pr_state = "open"
recorded = 2026-09-26
note = "a human note that must survive"

[[patch]]
id = "u102-util6"
target = "demo"
title = "Widen util_6"
origin = "upstream"
[patch.upstream]
prs = ["acme/demo#102"]
[patch.source]
kind = "pr"
ref = "acme/demo#102"
exclude = ["tests/**"]

[[patch]]
id = "c-extra"
target = "demo"
title = "Add extra.py"
origin = "upstream"
[patch.upstream]
commits = ["{commit}"]
[patch.source]
kind = "commit"
ref = "acme/demo@{commit}"

[[patch]]
id = "04-core-17"
target = "demo"
title = "core_17 from another repository's patch file"
origin = "port"
authors = ["dave"]
[patch.source]
kind = "repo-file"
ref = "acme/patches@main:series/04-core-17.patch"
"""


def write_ledger(dest: Path, w: World, text: str | None = None) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "patches.toml"
    path.write_text((text or LEDGER).format(base=w.base, commit=w.commit_sha))
    return path


def base_tree(w: World, dest: Path) -> Path:
    """The upstream base checked out (files only) at ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for path, data in w.files_at(w.base).items():
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        (dest / path).write_bytes(data)
    return dest
