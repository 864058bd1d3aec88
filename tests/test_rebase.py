"""Rebase on small real git repositories: every class, the written ledger, the human workflow,
rerere compatibility with git itself, plain directories, and SIGKILLs at the worst moments.

The fixture upstream has a tagged old base ``v1`` and, one commit per kind of drift, a new base
``v2``. Each patch is written against the old base (plus the patches before it) with ``difflib``
(not with the code under test) and is built to land in one class on ``v2`` (``tests.support.rebase_demo``).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from patchset.commands.rebase_view import render_rebase
from patchset.commands.table import Term
from patchset.engine.hunks import apply_file
from patchset.errors import InputError, LedgerError
from patchset.ledger.store import load_ledger
from patchset.patchfmt.diffs import parse_patch
from patchset.rebase.report import RebaseReport
from patchset.rebase.rerere import RRCache, normalize
from patchset.rebase.session import RebaseRun, abort, continue_rebase, rebase, skip
from tests.support.rebase_demo import ALL, EXPECTED, Demo, bodies, body, build, build_upstream, numbered
from tests.support.repo import GIT_IDENTITY, commit_files, git, new_repo
from tests.support.text import edit as sub
from tests.support.text import udiff

REPO_ROOT = Path(__file__).resolve().parent.parent


def digest(root: Path) -> dict[str, str]:
    """sha256 of every file of the ledger directory except rebase scratch/backup space."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and rel.parts[0] != ".patchset":
            out[str(rel)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def upstream_file(demo: Demo, ref: str, path: str) -> bytes | None:
    proc = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=demo.up, capture_output=True)
    return proc.stdout if proc.returncode == 0 else None


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    up = tmp_path_factory.mktemp("upstream") / "up"
    return up, build_upstream(up)


@pytest.fixture
def make(tmp_path, upstream):
    up, shas = upstream
    n = [0]

    def _make(include: list[str] | None = None) -> Demo:
        n[0] += 1
        return build(tmp_path / f"d{n[0]}", include, upstream=up, shas=shas)

    return _make


def resolved_series(demo: Demo) -> dict[str, bytes | None]:
    """Apply the ledger's active bodies to its recorded base with the zero-fuzz engine."""
    led = load_ledger(demo.ledger)
    base = led.targets["demo"].base
    files: dict[str, bytes | None] = {}
    for p in led.series("demo"):
        for fp in parse_patch(led.body_file(p).read_bytes(), 1):
            src = fp.path
            cur = files[src] if src in files else upstream_file(demo, base, src)
            out = apply_file(cur if fp.op != "create" else None, fp)
            assert out.ok, (p.id, out.message)
            assert all(h.status == "clean" for h in out.hunks), (p.id, [h.describe() for h in out.hunks])
            files[fp.target or src] = out.new
    return files


def test_every_class_is_reported_and_a_dry_run_writes_nothing(make):
    demo = make()
    before = digest(demo.root)
    report = rebase(RebaseRun(demo.ledger, "v2", dry_run=True))
    got = {p.id: (p.verdict, p.how) for p in report.patches}
    assert got == EXPECTED
    assert report.status == "conflicts" and not report.written
    assert digest(demo.root) == before and not (demo.root / ".patchset").exists()

    backport = report.get("p-backport")
    names = {e["name"] for e in backport.evidence}
    assert names == {"patch-id", "reverse-apply", "empty-replay"}
    assert demo.commits["backport"][:12] in next(e["detail"] for e in backport.evidence if e["name"] == "patch-id")
    pr = report.get("p-pr")
    assert [e["name"] for e in pr.evidence if e["decisive"]] == ["pr-merged"]
    assert demo.commits["pr"][:12] in pr.evidence[0]["detail"]
    port = report.get("p-port")
    assert port.evidence[0]["name"] == "port-merged" and "example/demo#7" in port.evidence[0]["detail"]

    move = report.get("p-move").files[0]
    assert (move.path, move.new_path, move.moved_from) == ("b.py", "sub/b.py", "b.py")

    conflict = report.get("p-conflict").files[0]
    assert conflict.how == "conflict" and conflict.path == "c.py"
    [hunk] = conflict.hunks
    assert hunk.index == 1 and 17 <= hunk.line <= 20
    # the commit that changed those lines, and not the other upstream commits
    assert [c["sha"] for c in hunk.commits] == [demo.commits["conflict"]]
    # the rest went on top of each other: the create patch after the conflict still carried
    assert report.get("p-create").verdict == "carried"
    json.dumps(report.to_json())  # JSON-serialisable as is
    assert RebaseReport.from_json(json.loads(json.dumps(report.to_json()))).to_json() == report.to_json()


def test_rebase_records_everything_in_the_ledger(make):
    demo = make([p for p in ALL if p != "p-conflict"])
    old_bodies = {p: demo.body(p).read_bytes() for p in ALL if p != "p-conflict"}
    report = rebase(RebaseRun(demo.ledger, "v2"))
    assert report.status == "done" and report.written and report.ok
    led = load_ledger(demo.ledger)
    assert led.targets["demo"].base == "v2"
    states = {p.id: (p.state, p.reason) for p in led.patches}
    assert states["p-backport"][0] == "dropped" and "patch-id" in states["p-backport"][1]
    assert states["p-port"][0] == "dropped" and states["p-port"][1].startswith("superseded on v2")
    assert states["p-pr"][0] == "dropped" and "example/demo#9" in states["p-pr"][1]
    assert led.get("p-move").files == ["sub/b.py"]
    # headers kept, diffs regenerated against v2, the lock follows
    for pid in ("p-clean", "p-merge", "p-offset", "p-move", "p-create"):
        new = demo.body(pid).read_bytes()
        assert new.startswith(f"Subject: {pid[2:]}\n\nWhy: {pid[2:]}.\n\n".encode())
        assert led.lock.bodies[pid] == hashlib.sha256(new).hexdigest()
    moved = demo.body("p-move").read_bytes()  # a plain diff stays plain (its own style), renamed path
    assert b"--- a/sub/b.py\n+++ b/sub/b.py\n" in moved and b"diff --git" not in moved
    # dropped bodies are kept as they were
    assert demo.body("p-backport").read_bytes() == old_bodies["p-backport"]
    # the new series applies to v2 with zero fuzz and no offset, and the lock has its hashes
    final = resolved_series(demo)
    tl = led.lock.targets["demo"]
    assert tl.base == "v2"
    assert tl.files == {p: hashlib.sha256(d).hexdigest() for p, d in final.items() if d is not None}
    assert tl.base_files["g.py"] == hashlib.sha256(upstream_file(demo, "v2", "g.py")).hexdigest()
    assert b"line 5 patched" in final["a.py"] and b"line 3 upstream" in final["a.py"]
    # the previous series is kept, with the report and the range-diff
    backup = demo.root / report.backup
    with tarfile.open(backup / "previous.tar") as tf:
        for pid, data in old_bodies.items():
            assert tf.extractfile(f"patchset/series/demo/{pid}.patch").read() == data
    assert "+@@ -32,7 +32,7 @@" in (backup / "range-diff.txt").read_text()
    assert json.loads((backup / "report.json").read_text())["counts"]["carried"] == 5
    assert not (demo.root / ".patchset" / "rebase").exists()


def test_regenerated_bodies_are_byte_stable(make, tmp_path, monkeypatch):
    include = [p for p in ALL if p != "p-conflict"]
    a, b = make(include), make(include)
    rebase(RebaseRun(a.ledger, "v2"))
    # a user whose git is configured to diff differently gets the same bytes
    hostile = tmp_path / "gitconfig"
    hostile.write_text(
        "[diff]\n\talgorithm = histogram\n\tcontext = 9\n\tnoprefix = true\n\tmnemonicPrefix = true\n"
        "\tsuppressBlankEmpty = true\n\tinterHunkContext = 20\n\tindentHeuristic = false\n"
        "[merge]\n\tconflictStyle = diff3\n"
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(hostile))
    rebase(RebaseRun(b.ledger, "v2"))
    for pid in include:
        assert a.body(pid).read_bytes() == b.body(pid).read_bytes(), pid
    assert a.ledger.with_suffix(".lock").read_bytes() == b.ledger.with_suffix(".lock").read_bytes()
    # rebasing the new series onto the same base again changes no byte
    before = digest(a.root)
    again = rebase(RebaseRun(a.ledger, "v2"))
    assert {p.how for p in again.patches} == {"clean"}
    assert {k: v for k, v in digest(a.root).items() if k != "patches.toml"} == {
        k: v for k, v in before.items() if k != "patches.toml"
    }


def _resolve_by_hand(path: Path) -> None:
    text = path.read_text()
    assert "<<<<<<< upstream v2\n" in text and ">>>>>>> patch p-conflict\n" in text
    text = text.replace(
        "<<<<<<< upstream v2\nc20 reworked upstream\n=======\nc20 mine\n>>>>>>> patch p-conflict\n",
        "c20 mine, on top of the rework\n",
    )
    path.write_text(text)


def test_interactive_stop_continue_and_recorded_resolution(make, tmp_path):
    demo = make()
    pristine = tmp_path / "pristine"
    shutil.copytree(demo.root, pristine)
    before = digest(demo.root)
    stop = rebase(RebaseRun(demo.ledger, "v2", interactive=True))
    assert stop.status == "stopped" and stop.stopped_at == "p-conflict"
    assert stop.work_files == [".patchset/rebase/work/c.py"]  # only the conflicted file
    assert [p.id for p in stop.patches][-1] == "p-conflict"
    assert digest(demo.root) == before  # nothing recorded yet
    with pytest.raises(InputError, match="in progress"):
        rebase(RebaseRun(demo.ledger, "v2"))
    with pytest.raises(InputError, match="conflict marker") as err:
        continue_rebase(demo.ledger)
    assert "work/c.py:" in err.value.render()
    _resolve_by_hand(demo.root / stop.work_files[0])
    done = continue_rebase(demo.ledger)
    assert done.status == "done" and done.written
    assert done.get("p-conflict").how == "edited"
    assert resolved_series(demo)["c.py"].count(b"c20 mine, on top of the rework\n") == 1
    [rid] = [d.name for d in (demo.root / "patchset" / "rr-cache").iterdir()]
    assert done.get("p-conflict").files[0].rerere_id == rid
    resolved_body = demo.body("p-conflict").read_bytes()

    # the next rebase of the same series meets the same conflict: the resolution replays
    shutil.copytree(demo.root / "patchset" / "rr-cache", pristine / "patchset" / "rr-cache")
    again = rebase(RebaseRun(pristine / "patches.toml", "v2"))
    assert again.status == "done"
    p = again.get("p-conflict")
    assert (p.verdict, p.how, p.files[0].rerere_id) == ("carried", "resolved", rid)
    assert (pristine / "patchset" / "series" / "demo" / "p-conflict.patch").read_bytes() == resolved_body


def test_skip_holds_the_patch_and_abort_restores_bytes(make):
    demo = make()
    before = digest(demo.root)
    rebase(RebaseRun(demo.ledger, "v2", interactive=True))
    done = skip(demo.ledger)
    assert done.status == "done"
    led = load_ledger(demo.ledger)
    held = led.get("p-conflict")
    assert held.state == "held" and "c.py" in held.reason and "v2" in held.reason
    assert demo.body("p-conflict").read_bytes() == bodies()["p-conflict"]  # still the old-base body

    demo2 = make()
    before = digest(demo2.root)
    rebase(RebaseRun(demo2.ledger, "v2", interactive=True))
    demo2.ledger.write_text("# someone edited the ledger meanwhile\n")
    demo2.body("p-clean").unlink()
    result = abort(demo2.ledger)
    assert result.was == "stopped"
    assert digest(demo2.root) == before
    assert not (demo2.root / ".patchset" / "rebase").exists()
    with pytest.raises(InputError, match="no rebase is in progress"):
        abort(demo2.ledger)


def test_rerere_ids_match_git_rerere(tmp_path):
    repo = tmp_path / "r"
    new_repo(repo, {"f.txt": "a\nb\nc\nd\ne\n"})
    git(repo, "config", "rerere.enabled", "true")
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "f.txt").write_text("a\nb side\nc\nd\ne side\n")
    git(repo, "commit", "-q", "-am", "side")
    git(repo, "checkout", "-q", "main")
    (repo / "f.txt").write_text("a\nb main\nc\nd\ne main\n")
    git(repo, "commit", "-q", "-am", "main")
    proc = subprocess.run(["git", "merge", "side"], cwd=repo, capture_output=True, env={**os.environ, **GIT_IDENTITY})
    assert proc.returncode != 0
    conflicted = (repo / "f.txt").read_bytes()
    [entry] = list((repo / ".git" / "rr-cache").iterdir())
    n = normalize(conflicted)
    assert n.conflict_id == entry.name
    assert n.preimage == (entry / "preimage").read_bytes()
    # the same conflict seen from the other side (ours/theirs swapped) has the same id
    swapped = conflicted.replace(b"main", b"TMP").replace(b"side", b"main").replace(b"TMP", b"side")
    assert normalize(swapped).conflict_id == entry.name
    # a resolution we record is one git rerere can use: same layout, same id
    rr = RRCache(tmp_path / "ledger")
    assert rr.record(conflicted, b"a\nb both\nc\nd\ne both\n") == entry.name
    assert (tmp_path / "ledger" / "patchset" / "rr-cache" / entry.name / "preimage").read_bytes() == (
        entry / "preimage"
    ).read_bytes()


def test_plain_directories_rebase_the_same_way(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    for d in (old, new):
        d.mkdir()
    (old / "pkg").mkdir()
    (old / "pkg" / "mod.py").write_text(numbered("m"))
    (old / "keep.py").write_text(numbered("k"))
    (new / "pkg2").mkdir()
    (new / "pkg2" / "mod.py").write_text(sub(numbered("m"), "m2\n", "m2 upstream\n"))  # moved and changed
    (new / "keep.py").write_text(numbered("k"))
    root = tmp_path / "ledger"
    (root / "patchset" / "series" / "plain").mkdir(parents=True)
    (root / "patchset" / "series" / "plain" / "p1.patch").write_text(
        udiff("pkg/mod.py", numbered("m"), sub(numbered("m"), "m30\n", "m30 patched\n"))
    )
    (root / "patchset" / "series" / "plain" / "p2.patch").write_text(
        udiff("keep.py", numbered("k"), sub(numbered("k"), "k5\n", "k5 patched\n"))
    )
    (root / "patches.toml").write_text(
        f'schema = 1\n[targets.plain]\nupstream = "https://example.invalid/plain.git"\ngithub = "e/plain"\n'
        f'base = "{old}"\n\n[[patch]]\nid = "p1"\ntarget = "plain"\ntitle = "p1"\norigin = "ours"\n\n'
        f'[[patch]]\nid = "p2"\ntarget = "plain"\ntitle = "p2"\norigin = "ours"\n'
    )
    report = rebase(RebaseRun(root / "patches.toml", str(new)))
    assert report.status == "done"
    assert {p.id: p.how for p in report.patches} == {"p1": "moved", "p2": "clean"}
    led = load_ledger(root / "patches.toml")
    assert led.targets["plain"].base == str(new)
    body = (root / "patchset" / "series" / "plain" / "p1.patch").read_bytes()
    [fp] = parse_patch(body, 1)
    out = apply_file((new / "pkg2" / "mod.py").read_bytes(), fp)
    assert fp.path == "pkg2/mod.py" and out.ok and b"m30 patched" in out.new and b"m2 upstream" in out.new


def test_an_ambiguous_move_is_followed_with_a_warning(tmp_path):
    up = tmp_path / "up"
    new_repo(up, {"x/kernel.py": numbered("k", 60)})
    git(up, "tag", "v1")
    git(up, "rm", "-q", "x/kernel.py")
    commit_files(
        up,
        "split the kernel per vendor",
        {f"{d}/kernel.py": sub(numbered("k", 60), "k50\n", f"k50 {d}\n") for d in ("amd", "nvidia")},
    )
    git(up, "tag", "v2")
    root = tmp_path / "ledger"
    (root / "patchset" / "series" / "t").mkdir(parents=True)
    (root / "patchset" / "series" / "t" / "p.patch").write_text(
        udiff("x/kernel.py", numbered("k", 60), sub(numbered("k", 60), "k10\n", "k10 patched\n"))
    )
    (root / "patches.toml").write_text(
        f'schema = 1\n[targets.t]\nupstream = "{up}"\ngithub = "e/t"\nbase = "v1"\n\n'
        '[[patch]]\nid = "p"\ntarget = "t"\ntitle = "p"\norigin = "ours"\n'
    )
    report = rebase(RebaseRun(root / "patches.toml", "v2", dry_run=True))
    p = report.get("p")
    assert p.verdict == "carried" and p.how == "moved"
    assert len(p.files[0].move_candidates) == 2
    [warning] = p.warnings
    assert "ambiguous" in warning and "amd/kernel.py" in warning and "nvidia/kernel.py" in warning


def test_bad_input_is_a_domain_error(make):
    demo = make(["p-clean"])
    before = digest(demo.root)
    with pytest.raises(InputError, match="not a commit, tag or branch"):
        rebase(RebaseRun(demo.ledger, "v9"))
    with pytest.raises(InputError, match="unknown target"):
        rebase(RebaseRun(demo.ledger, "v2", target="nope"))
    with pytest.raises(InputError, match="no rebase is stopped"):
        continue_rebase(demo.ledger)
    demo.body("p-clean").unlink()
    with pytest.raises(LedgerError, match="not imported"):
        rebase(RebaseRun(demo.ledger, "v2"))
    assert {k: v for k, v in digest(demo.root).items()} == {k: v for k, v in before.items() if "p-clean" not in k}


def test_a_broken_body_is_reported_not_crashed(make):
    demo = make(["p-clean"])
    demo.body("p-clean").write_bytes(
        body(
            "clean",
            udiff(
                "a.py", sub(numbered("line ", 60), "line 40\n", "X\n"), sub(numbered("line ", 60), "line 40\n", "Y\n")
            ),
        )
    )
    report = rebase(RebaseRun(demo.ledger, "v2", dry_run=True))
    f = report.get("p-clean").files[0]
    assert report.get("p-clean").verdict == "conflict" and f.how == "broken"
    assert "does not apply to the old base" in f.message


def test_render_shows_classes_conflicts_and_range_diffs(make):
    demo = make()
    report = rebase(RebaseRun(demo.ledger, "v2", dry_run=True))
    buf = io.StringIO()
    render_rebase(Term(buf, tty=True, width=200, color=False), report)
    text = buf.getvalue()
    for word in (
        "carried (merged)",
        "already-upstream",
        "superseded",
        "conflict",
        "b.py -> sub/b.py",
        "c: rework c20",
        "range-diff p-offset",
    ):
        assert word in text, word


# --------------------------------------------------------------------------- kills

_CHILD = """
from pathlib import Path
from patchset.rebase.session import RebaseRun, rebase
rebase(RebaseRun(Path({ledger!r}), "v2"))
"""


def _run_and_kill(demo: Demo, phase: str, tmp_path: Path) -> None:
    marker = tmp_path / f"paused-{phase}-{time.monotonic_ns()}"
    env = {**os.environ, "PATCHSET_REBASE_PAUSE": f"{phase}:{marker}"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(ledger=str(demo.ledger))],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"child ended before {phase}: {proc.stderr.read().decode()[-2000:]}")
        assert time.monotonic() < deadline, f"child never reached {phase}"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("phase", ["journal", "written"])
def test_sigkill_while_writing_loses_nothing(make, tmp_path, phase):
    include = [p for p in ALL if p != "p-conflict"]
    reference = make(include)
    rebase(RebaseRun(reference.ledger, "v2"))
    want = digest(reference.root)

    demo = make(include)
    before = digest(demo.root)
    _run_and_kill(demo, phase, tmp_path)
    if phase == "journal":
        assert digest(demo.root) == before  # killed before the first rename
    else:
        assert digest(demo.root) == want  # killed after the last rename, before clean-up
    with pytest.raises(InputError, match="interrupted while writing"):
        rebase(RebaseRun(demo.ledger, "v2"))
    assert abort(demo.ledger).was == "committing"
    assert digest(demo.root) == before

    # the same kill, then --continue: the new series is written exactly as without the kill
    demo2 = make(include)
    _run_and_kill(demo2, phase, tmp_path)
    report = continue_rebase(demo2.ledger)
    assert report.written and report.status == "done"
    assert digest(demo2.root) == want
    assert not (demo2.root / ".patchset" / "rebase").exists()


def test_abort_restores_a_half_written_series(make, tmp_path):
    """A kill between two renames of the write (simulated: half the journal's files written)."""
    include = [p for p in ALL if p != "p-conflict"]
    demo = make(include)
    before = digest(demo.root)
    _run_and_kill(demo, "journal", tmp_path)
    journal = json.loads((demo.root / ".patchset" / "rebase" / "commit.json").read_text())
    rels = sorted(journal["files"])
    assert "patches.toml" in rels and "patches.lock" in rels
    for rel in rels[: len(rels) // 2]:
        (demo.root / rel).write_bytes(base64.b64decode(journal["files"][rel]))
    assert digest(demo.root) != before
    abort(demo.ledger)
    assert digest(demo.root) == before


def test_sigkill_during_replay_leaves_no_trace(make, tmp_path):
    demo = make([p for p in ALL if p != "p-conflict"])
    before = digest(demo.root)
    _run_and_kill(demo, "replay", tmp_path)
    assert digest(demo.root) == before
    report = rebase(RebaseRun(demo.ledger, "v2"))  # nothing blocks the next run
    assert report.status == "done"
