"""The world of the kind x command matrix (``tests/test_kind_matrix.py``): one small upstream, and
one ledger per way a patch enters a ledger, each holding one patch that makes the same change.

The upstream is an ordinary (non-bare) git clone with a linear ``main`` whose commits are the
rebase cases: ``base`` (the series' base), ``clean`` (an unrelated file), ``offset`` (lines added
above the patched line), ``conflict`` (the patched line changed) and ``upstream`` (the patch's
change itself merged). The same base is served as a pure wheel by a local package index
(``tests.support.localindex``) and the patch as pull request #7 by the GitHub-shaped server
(``tests.support.fakehub``). Every ledger is made by the real ``patchset import`` of its form.

All ledger setup goes through ``make_ledger``: one place to add a step every ledger needs.
"""

from __future__ import annotations

import enum
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from patchset.ledger.model import PatchKind
from tests.support.consent import allow_ledger
from tests.support.repo import commit_files, git, new_repo
from tests.support.text import edit, udiff

REPO = "acme/demo"
TOKEN = "ghp_kindMatrixToken0000000000000000000000"
PR = 7
PACKAGE = "demo-pkg"  # the name tests.support.wheel_demo.make_wheel writes into the wheel's metadata
VERSION = "1.0"
PATH = "demo/core.py"
OLD, NEW = "VALUE_5 = 5\n", "VALUE_5 = 500\n"
CORE = '"""core values"""\n' + "".join(f"VALUE_{i} = {i}\n" for i in range(40))
FIXED = edit(CORE, OLD, NEW)
HEADER = "".join(f"# upstream header line {i}\n" for i in range(6))
INIT = "from demo.core import VALUE_1\n"

SCRIPT = f"""\
import sys
from pathlib import Path

p = Path(sys.argv[1])
text = p.read_text()
if {NEW!r} in text:
    print("patch_core: already patched")
    sys.exit(0)
if text.count({OLD!r}) != 1:
    sys.exit("patch_core: anchor 'VALUE_5 = 5' not found in " + str(p))
p.write_text(text.replace({OLD!r}, {NEW!r}))
"""

TEST = f"""
[[patch.tests]]
name = "value-5"
command = "{sys.executable} -c \\"import sys; sys.exit('{NEW.strip()}' not in open('{PATH}').read())\\""
"""


class Form(enum.Enum):
    """How the matrix brings a patch in: each form is one ``patchset import`` and has a kind."""

    DIFF = "diff"
    MAIL = "mail"
    QUILT = "quilt"
    OVERLAY = "overlay"
    GENERATED = "generated"
    REVERT = "revert"
    PR_FETCHED = "pr-fetched"
    PR_UNFETCHED = "pr-unfetched"

    @property
    def kind(self) -> PatchKind:
        """The kind the model must read back from the ledger this form wrote."""
        return {
            Form.DIFF: PatchKind.DIFF,
            Form.MAIL: PatchKind.DIFF,
            Form.QUILT: PatchKind.DIFF,
            Form.OVERLAY: PatchKind.OVERLAY,
            Form.GENERATED: PatchKind.GENERATED,
            Form.REVERT: PatchKind.REVERT,
            Form.PR_FETCHED: PatchKind.PR,
            Form.PR_UNFETCHED: PatchKind.PR,
        }[self]

    @property
    def has_body(self) -> bool:
        return self is not Form.PR_UNFETCHED


@dataclass
class World:
    root: Path
    upstream: Path  # a non-bare clone
    commits: dict[str, str] = field(default_factory=dict)  # case -> sha
    wheels: Path = Path()
    sources: Path = Path()  # what the imports read

    @property
    def base(self) -> str:
        return self.commits["base"]

    def checkout(self, dest: Path, case: str = "base") -> Path:
        """The files of ``case`` as a plain directory (a build tree)."""
        git(self.root, "clone", "-q", str(self.upstream), str(dest))
        git(dest, "checkout", "-q", self.commits[case])
        shutil.rmtree(dest / ".git")
        return dest

    def hub_data(self) -> dict:
        return {
            "tokens": [TOKEN],
            "repos": {
                REPO: {
                    "pulls": {
                        str(PR): {
                            "title": "Raise VALUE_5",
                            "author": "alice",
                            "diff": udiff(PATH, CORE, FIXED),
                            "review_decision": "APPROVED",
                            "ci": "SUCCESS",
                        }
                    }
                }
            },
        }


def build_world(root: Path) -> World:
    up = root / "upstream"
    w = World(root, up)
    c = w.commits
    c["initial"] = new_repo(up, {PATH: FIXED, "demo/__init__.py": INIT, "README": "demo\n"}, "Initial import (#1)")
    c["base"] = commit_files(up, "Lower VALUE_5 (#2)", {PATH: CORE})
    c["clean"] = commit_files(up, "Docs (#3)", {"docs/notes.md": "notes\n"})
    c["offset"] = commit_files(up, "A header for core (#4)", {PATH: HEADER + CORE})
    c["conflict"] = commit_files(up, "Retune VALUE_5 (#5)", {PATH: HEADER + edit(CORE, OLD, "VALUE_5 = 6\n")})
    c["upstream"] = commit_files(up, "Raise VALUE_5 (#6)", {PATH: HEADER + FIXED})
    from tests.support.wheel_demo import make_wheel

    w.wheels = root / "wheels"
    make_wheel(w.wheels / f"demo_pkg-{VERSION}-py3-none-any.whl", {PATH: CORE, "demo/__init__.py": INIT})
    _sdist(w.wheels / f"demo_pkg-{VERSION}.tar.gz", {PATH: CORE, "demo/__init__.py": INIT})
    s = w.sources = root / "sources"
    s.mkdir()
    (s / "plain.diff").write_text(udiff(PATH, CORE, FIXED))
    mail = root / "mailer"
    git(root, "clone", "-q", str(up), str(mail))
    git(mail, "checkout", "-q", "-b", "fix", c["base"])
    commit_files(mail, "Raise VALUE_5 for big inputs\n\nThe low value starves the queue.", {PATH: FIXED})
    (s / "0001-raise.patch").write_text(git(mail, "format-patch", "--stdout", "-1"))
    quilt = s / "quilt"
    quilt.mkdir()
    (quilt / "series").write_text("# the downstream series\nraise-value.patch -p1\n")
    (quilt / "raise-value.patch").write_text(
        "Description: Raise VALUE_5\nAuthor: Dee <dee@example.com>\nForwarded: no\n---\n" + udiff(PATH, CORE, FIXED)
    )
    (s / "overlay" / "demo").mkdir(parents=True)
    (s / "overlay" / PATH).write_text(FIXED)
    (s / "patch_core.py").write_text(SCRIPT)
    return w


def _sdist(path: Path, files: dict[str, str]) -> None:
    """A source distribution as ``python -m build --sdist`` lays it out: one top directory, PKG-INFO."""
    import io
    import tarfile

    top = path.name.removesuffix(".tar.gz")
    info = f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n"
    with tarfile.open(path, "w:gz") as tf:
        for name, text in {"PKG-INFO": info, **files}.items():
            data = text.encode()
            member = tarfile.TarInfo(f"{top}/{name}")
            member.size, member.mtime, member.mode = len(data), 1_700_000_000, 0o644
            tf.addfile(member, io.BytesIO(data))


LEDGER = """\
schema = 1

[targets.demo]
upstream = "{upstream}"
github = "{repo}"
base = "{base}"
package = "{package}"
installed_root = "/usr/lib/python3/dist-packages"
base_image = "example.invalid/demo-base:1.0"
"""


def make_ledger(w: World, form: Form, dest: Path, run, *, tests: bool = False, upstream: Path | None = None) -> Path:
    """A ledger directory (a git work tree) holding the one patch ``form`` imports, on the world's
    base; ``tests``: the patch also carries a command test; ``upstream``: the target's clone (default
    the world's ordinary one). ``run`` is the CLI fixture (the PR forms need the hub's environment)."""
    dest.mkdir(parents=True)
    up = upstream or w.upstream
    (dest / "patches.toml").write_text(LEDGER.format(upstream=up, repo=REPO, base=w.base, package=PACKAGE))
    s = w.sources
    args: list[str | Path] = {
        Form.DIFF: [s / "plain.diff"],
        Form.MAIL: [s / "0001-raise.patch"],
        Form.QUILT: [s / "quilt"],
        Form.OVERLAY: ["--overlay", s / "overlay", "--base", w.base],
        Form.GENERATED: ["--script", f"python3 {s / 'patch_core.py'} {{root}}/{PATH}", "--id", "gen", "--base", w.base],
        Form.REVERT: ["--revert", w.base],
        Form.PR_FETCHED: ["--pr", f"{REPO}#{PR}"],
        Form.PR_UNFETCHED: ["--pr", f"{REPO}#{PR}"],
    }[form]
    r = run("import", *args, "--target", "demo", cwd=dest)
    assert r.code == 0, (form, r)
    if form is Form.PR_FETCHED:
        r = run("fetch", "--all", cwd=dest)
        assert r.code == 0, (form, r)
    if form.has_body:
        r = run("apply", "--tree", w.checkout(dest.parent / f"{dest.name}-lock"), "--update-lock", cwd=dest)
        assert r.code == 0, (form, r)
    if tests:
        with open(dest / "patches.toml", "a") as fh:
            fh.write(TEST)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", f"a ledger of one {form.value} patch")
    allow_ledger(dest)  # as its user would: `patchset allow` (the ledger's edit script and test command)
    return dest
