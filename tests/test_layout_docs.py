"""The docs match the tree (issue 32, item 7): docs/layout.md names every package and top-level
folder, and only folders that exist; the README's short version names only folders that exist;
every relative link in the README and in docs/ reaches a file, and an anchor into a Markdown file
reaches one of its headings (so a section that moved cannot leave a dead link behind)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.repo import REPO_ROOT

LAYOUT = (REPO_ROOT / "docs" / "layout.md").read_text()
README = (REPO_ROOT / "README.md").read_text()
PACKAGE_ROOTS = ("patchset", "tracker", "verify", "ci")
TOP_FOLDERS = ("engines", "examples", "bench", "tests", "docs")
FOLDER = re.compile(r"`([\w.-]+(?:/[\w.-]+)*)/`")


def packages() -> set[str]:
    """Every directory with an ``__init__.py`` under the four package roots, as ``path/``."""
    found = set()
    for root in PACKAGE_ROOTS:
        for init in (REPO_ROOT / root).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO_ROOT)
            if "__pycache__" not in rel.parts:
                found.add(f"{rel.as_posix()}/")
    return found


def layout_rows() -> list[str]:
    """The folder each row of the table in "Packages and folders" is about (its first cell)."""
    body = LAYOUT.split("\n## Packages and folders\n", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in body.splitlines() if ln.startswith("| `")]
    out = []
    for row in rows:
        m = FOLDER.fullmatch(row.split(" | ", 1)[0][2:])
        assert m, f"docs/layout.md: a row whose first cell is not one folder: {row[:80]}"
        out.append(f"{m.group(1)}/")
    return out


def test_layout_names_every_package_and_top_folder() -> None:
    named = layout_rows()
    assert len(named) == len(set(named)), "docs/layout.md names a folder twice"
    assert {"patchset/", "patchset/ledger/", "tracker/github/", "ci/scripts/"} <= packages()  # the scan works
    missing = sorted(packages() - set(named)) + sorted(f"{t}/" for t in TOP_FOLDERS if f"{t}/" not in named)
    assert missing == [], f"docs/layout.md does not say what these are for: {missing}"


def test_layout_names_no_folder_that_is_not_there() -> None:
    for name in layout_rows():
        path = REPO_ROOT / name
        assert path.is_dir(), f"docs/layout.md names {name}, which does not exist"
        if name.split("/")[0] in PACKAGE_ROOTS:
            assert (path / "__init__.py").is_file(), f"docs/layout.md names {name} as a package: no __init__.py"


def test_every_folder_the_layout_and_the_readme_mention_exists() -> None:
    """Any ``folder/`` in backticks in docs/layout.md, and each entry of the README's short version."""
    block = README.split("\n## Where things live\n", 1)[1].split("```", 2)[1]
    short = [ln.split()[0] for ln in block.splitlines() if ln.strip()]
    assert {"patchset/", "tracker/", "verify/", "ci/", *(f"{t}/" for t in TOP_FOLDERS)} <= set(short)
    mentioned = {f"{m}/" for m in FOLDER.findall(LAYOUT) if "*" not in m and "<" not in m}
    mentioned.discard("patchset/series/")  # a ledger's bodies: the prose says it appears only once imported
    gone = sorted(n for n in set(short) | mentioned if not (REPO_ROOT / n).is_dir())
    assert gone == [], f"named but not in the tree: {gone}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def test_every_relative_link_in_the_docs_reaches_its_file_and_heading() -> None:
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    broken = []
    checked = 0
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        for target, anchor in re.findall(r"\]\(([^)\s#:]*)(?:#([^)\s]+))?\)", text):
            dest = (page.parent / target).resolve() if target else page
            checked += 1
            if not dest.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.name}: {target}#{anchor}")
    assert checked > 50  # the scan works
    assert broken == []
