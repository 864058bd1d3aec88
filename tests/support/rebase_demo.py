"""The rebase demo: a small real git upstream with one commit per kind of drift, and a ledger of
patches built to land in each rebase class.

The upstream has a tagged old base ``v1`` and a new base ``v2``. Each patch is written against the
old base (plus the patches before it) with ``difflib`` (not with the code under test). Used by the
rebase tests and by the output-width tests (``prefix`` gives the patch ids a long prefix, as real
ids have).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests.support.repo import commit_files, git, new_repo
from tests.support.text import edit as sub
from tests.support.text import udiff


def numbered(prefix: str, n: int = 40) -> str:
    return "".join(f"{prefix}{i}\n" for i in range(1, n + 1))


def body(title: str, *diffs: str) -> bytes:
    return (f"Subject: {title}\n\nWhy: {title}.\n\n" + "".join(diffs)).encode()


BASE_FILES = {
    "a.py": numbered("line ", 60),
    "b.py": numbered("b"),
    "c.py": numbered("c"),
    "d.py": numbered("d"),
    "e.py": numbered("e"),
    "f.py": numbered("f"),
    "g.py": numbered("g"),
}

ALL = ["p-clean", "p-merge", "p-offset", "p-move", "p-conflict", "p-backport", "p-port", "p-pr", "p-create"]
EXPECTED = {
    "p-clean": ("carried", "clean"),
    "p-merge": ("carried", "merged"),
    "p-offset": ("carried", "offset"),
    "p-move": ("carried", "moved"),
    "p-conflict": ("conflict", ""),
    "p-backport": ("already-upstream", ""),
    "p-port": ("superseded", ""),
    "p-pr": ("already-upstream", ""),
    "p-create": ("carried", "clean"),
}


@dataclass
class Demo:
    root: Path  # the ledger's directory
    up: Path  # the upstream repository
    commits: dict[str, str] = field(default_factory=dict)  # drift name -> sha

    @property
    def ledger(self) -> Path:
        return self.root / "patches.toml"

    def body(self, pid: str) -> Path:
        return self.root / "patchset" / "series" / "demo" / f"{pid}.patch"


def build_upstream(up: Path) -> dict[str, str]:
    new_repo(up, BASE_FILES, "old base")
    git(up, "tag", "v1")
    shas: dict[str, str] = {}

    def commit(name: str, msg: str) -> None:
        shas[name] = commit_files(up, msg)

    (up / "g.py").write_text("".join(f"# header {i}\n" for i in range(5)) + BASE_FILES["g.py"])
    commit("offset", "g: add a header")
    (up / "a.py").write_text(sub(BASE_FILES["a.py"], "line 3\n", "line 3 upstream\n"))
    commit("near", "a: reword line 3")
    (up / "sub").mkdir()
    git(up, "mv", "b.py", "sub/b.py")
    commit("move", "move b.py to sub/")
    (up / "c.py").write_text(sub(BASE_FILES["c.py"], "c20\n", "c20 reworked upstream\n"))
    commit("conflict", "c: rework c20")
    (up / "d.py").write_text(sub(BASE_FILES["d.py"], "d10\n", "d10 fixed\n"))
    commit("backport", "d: fix d10")
    (up / "e.py").write_text(sub(BASE_FILES["e.py"], "e15\n", "e15 done the upstream way\n"))
    commit("port", "e: the feature the port ports (#7)")
    (up / "f.py").write_text(sub(BASE_FILES["f.py"], "f12\n", "f12 pr9 revision 2\n"))
    commit("pr", "Merge pull request #9: f12")
    (up / "z.py").write_text("unrelated\n")
    commit("unrelated", "z: unrelated")
    git(up, "tag", "v2")
    return shas


def bodies() -> dict[str, bytes]:
    a0 = BASE_FILES["a.py"]
    a1 = sub(a0, "line 40\n", "line 40 patched\n")
    return {
        "p-clean": body("clean", udiff("a.py", a0, a1)),
        "p-merge": body("merge", udiff("a.py", a1, sub(a1, "line 5\n", "line 5 patched\n"))),
        "p-offset": body(
            "offset", udiff("g.py", BASE_FILES["g.py"], sub(BASE_FILES["g.py"], "g30\n", "g30 patched\n"))
        ),
        "p-move": body("move", udiff("b.py", BASE_FILES["b.py"], sub(BASE_FILES["b.py"], "b10\n", "b10 patched\n"))),
        "p-conflict": body(
            "conflict", udiff("c.py", BASE_FILES["c.py"], sub(BASE_FILES["c.py"], "c20\n", "c20 mine\n"))
        ),
        "p-backport": body(
            "backport", udiff("d.py", BASE_FILES["d.py"], sub(BASE_FILES["d.py"], "d10\n", "d10 fixed\n"))
        ),
        "p-port": body(
            "port", udiff("e.py", BASE_FILES["e.py"], sub(BASE_FILES["e.py"], "e15\n", "e15 the port's way\n"))
        ),
        "p-pr": body("pr", udiff("f.py", BASE_FILES["f.py"], sub(BASE_FILES["f.py"], "f12\n", "f12 pr9 revision 1\n"))),
        "p-create": body("create", udiff("new.py", None, "print('new')\n")),
    }


def build(
    tmp: Path,
    include: list[str] | None = None,
    *,
    upstream: Path | None = None,
    shas: dict[str, str] | None = None,
    prefix: str = "",
) -> Demo:
    """The upstream (built once per call unless given) and a ledger with the ``include``d patches,
    each id written as ``prefix + id`` (``p-clean`` by default)."""
    up = upstream or tmp / "up"
    if upstream is None:
        shas = build_upstream(up)
    assert shas is not None
    root = tmp / "ledger"
    (root / "patchset" / "series" / "demo").mkdir(parents=True)
    demo = Demo(root, up, shas)
    toml = [
        "# the demo ledger",
        "schema = 1",
        "",
        "[targets.demo]",
        f'upstream = "{up}"',
        'github = "example/demo"',
        'base = "v1"   # the old base',
        "",
    ]
    files = {
        "p-clean": "a.py",
        "p-merge": "a.py",
        "p-offset": "g.py",
        "p-move": "b.py",
        "p-conflict": "c.py",
        "p-backport": "d.py",
        "p-port": "e.py",
        "p-pr": "f.py",
        "p-create": "new.py",
    }
    for pid, data in bodies().items():
        if include is not None and pid not in include:
            continue
        demo.body(prefix + pid).write_bytes(data)
        origin = {"p-backport": "upstream", "p-port": "port", "p-pr": "upstream"}.get(pid, "ours")
        toml += [
            "[[patch]]",
            f'id = "{prefix}{pid}"',
            'target = "demo"',
            f'title = "{pid}"',
            f'origin = "{origin}"',
            f'files = ["{files[pid]}"]',
        ]
        if pid == "p-port":
            toml += [
                "[patch.upstream]",
                'ports = ["example/demo#7"]',
                "[patch.status]",
                'pr_state = "merged"',
                f'merge_commit = "{shas["port"]}"',
            ]
        if pid == "p-pr":
            toml += [
                "[patch.upstream]",
                'prs = ["example/demo#9"]',
                "[patch.status]",
                'pr_state = "merged"',
                f'merge_commit = "{shas["pr"]}"',
            ]
        toml.append("")
    demo.ledger.write_text("\n".join(toml))
    return demo
