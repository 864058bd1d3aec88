"""What a patch watches of the modules its patched file imports: the names it uses (issue #34).

* each import form (``from m import X``, a re-export followed to its module, ``import a.b as m`` and
  ``m.NAME``, ``from pkg import mod`` and ``mod.NAME``, ``import a.b`` and ``a.b.NAME``) watches the
  definitions of the names read; a name used in annotations only, or imported under
  ``TYPE_CHECKING``, is not watched; a star import, a module used as a value and a module that does
  not parse are watched whole;
* through the planner (``watch_for`` on a real dry run, ``decide``): a change to an unwatched name,
  a comment, a docstring or an annotation carries the verdict; a change to a watched name, to what
  it uses in its module (one level), or anywhere in a module watched whole re-proves it;
* ``watch = "files"`` on the target: every import watched whole, as before;
* the same on real vLLM 0.30.0 files (``network``: the sdist from the package index) and the change
  of their names from 0.30.0 to 0.31.0 as the month's simulation takes it.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from patchset.engine.results import SeriesItem
from patchset.engine.tree import apply_series
from patchset.errors import LedgerError
from patchset.ledger.model import WatchScope
from patchset.ledger.store import load_ledger
from patchset.verify.outcomes import PROVEN
from patchset.verify.plan.decide import CARRY, RUN, PlanOptions, PlanPatch, PlanTest, decide
from patchset.verify.plan.names import Module, Tree, changed_names, parse
from patchset.verify.plan.simulate import spread
from patchset.verify.plan.watch import Watch, watch_for, watched
from patchset.verify.proofs import LastVerdict, PatchProof, TargetHistory, WithoutProof

PATCHED = "pkg/worker.py"
WORKER = """from __future__ import annotations

import pkg.envs as envs
import pkg.util
from pkg import ops, raw
from pkg.config import Config
from pkg.hints import Hint
from pkg.star import *  # noqa: F403
from pkg.broken import thing
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pkg.only_types import Typed


def run(cfg: Hint, t: Typed) -> int:
    if envs.FLAG:
        return ops.kernel(Config(cfg)) + pkg.util.helper() + thing
    return getattr(raw, "fallback")()
"""
MODULES = {
    "pkg/__init__.py": "",
    "pkg/envs.py": 'import os\n\nFLAG = os.environ.get("FLAG") == "1"\nOTHER = 2\n',
    "pkg/util.py": "def helper():\n    return 1\n\n\ndef unused():\n    return 2\n",
    "pkg/ops.py": "SCALE = 2\n\n\ndef kernel(cfg):\n    return cfg.size * SCALE\n\n\ndef other():\n    return 0\n",
    "pkg/raw.py": "def fallback():\n    return 0\n",
    "pkg/config/__init__.py": "from pkg.config.main import Config\nfrom pkg.config.main import Unused\n",
    "pkg/config/main.py": (
        "class Base:\n    size = 1\n\n\n"
        "class Config(Base):\n    '''The configuration.'''\n\n    def __init__(self, cfg: int) -> None:\n"
        "        self.cfg = cfg  # kept\n\n\nclass Unused:\n    pass\n"
    ),
    "pkg/hints.py": "Hint = int\n",
    "pkg/only_types.py": "Typed = str\n",
    "pkg/star.py": "from os import *  # noqa: F403\n",
    "pkg/broken.py": "def thing(:\n",
    PATCHED: WORKER,
}
EXPECTED = {
    "pkg/envs.py::FLAG": "used by pkg/worker.py",
    "pkg/util.py::helper": "used by pkg/worker.py",
    "pkg/ops.py::kernel": "used by pkg/worker.py",
    "pkg/__init__.py::ops": "used by pkg/worker.py",
    "pkg/raw.py": "imported by pkg/worker.py",  # getattr(raw, ...): all of it may be read
    "pkg/__init__.py::raw": "used by pkg/worker.py",
    "pkg/config/__init__.py::Config": "used by pkg/worker.py",
    "pkg/config/main.py::Config": "used by pkg/worker.py",  # the re-export, followed
    "pkg/star.py": "imported by pkg/worker.py",  # a star import: whole
    "pkg/broken.py": "imported by pkg/worker.py",  # does not parse: whole
}


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _modules(root: Path) -> Tree:
    def read(rel: str) -> str | None:
        path = root / rel
        return path.read_text() if path.is_file() else None

    return Tree(read, lambda rel: (root / rel).is_file())


def test_each_import_form_watches_the_names_the_patched_file_reads(tmp_path: Path) -> None:
    _tree(tmp_path, MODULES)
    got = watched(WORKER, PATCHED, [], _modules(tmp_path), lambda rel: False)
    assert got == EXPECTED  # no pkg/hints.py (annotations only), no pkg/only_types.py (TYPE_CHECKING)
    added = ["    return ops.other() + envs.OTHER", "from pkg.hints import Hint", "    Hint()"]
    more = watched(WORKER, PATCHED, added, _modules(tmp_path), lambda rel: False)
    assert more.keys() - got.keys() == {"pkg/ops.py::other", "pkg/envs.py::OTHER", "pkg/hints.py::Hint"}
    # a module the series writes is watched whole (its names with the series are not known)
    written = watched(WORKER, PATCHED, [], _modules(tmp_path), lambda rel: rel == "pkg/ops.py")
    assert "pkg/ops.py" in written and "pkg/ops.py::kernel" not in written
    # the patched file does not parse: every file it imports, whole (the import scan)
    assert "pkg/ops.py" in watched(
        "def broken(:\nimport pkg.ops\n", PATCHED, ["import pkg.ops"], _modules(tmp_path), bool
    )
    # by_name off (``watch = "files"`` on the target): each imported file whole, as before
    files = watched(WORKER, PATCHED, [], _modules(tmp_path), lambda rel: False, by_name=False)
    assert "pkg/ops.py" in files and "pkg/hints.py" in files and not any("::" in k for k in files)


def _diff(rel: str, old: str, new: str) -> bytes:
    text = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}"))
    return f"diff --git a/{rel} b/{rel}\n{text}".encode()


def _watch(base: Path, by_name: bool = True) -> Watch:
    """The planner's watch of the one patch, from a real dry run of it on ``base``."""
    body = _diff(PATCHED, WORKER, WORKER.replace("+ thing", "+ thing + 1"))
    items = [SeriesItem("p", body)]
    full = apply_series(base, items, dry_run=True)
    assert full.ok, full
    return watch_for(base, "p", full, None, {}, by_name)


def _decision(before: Watch, after: Watch) -> tuple[str, list[str]]:
    proof = PatchProof(
        3,
        "2026-11-01T02:00:00Z",
        "night 3",
        PROVEN,
        "b" * 16,
        {"lc": WithoutProof("s" * 16, "fail")},
        {k: list(v) for k, v in before.digests.items()},
        dict(before.why),
    )
    history = TargetHistory(3, {"p": proof})
    history.last["p"] = LastVerdict(PROVEN, 3, "2026-11-01T02:00:00Z", "night 3")
    patch = PlanPatch("p", "b" * 16, [PlanTest("lc", "s" * 16, "e" * 16, "cpu")], after)
    d = decide(patch, history, PlanOptions(history="proofs.json", full_every=0), 4, "night 4")
    return d.action, d.reasons


@pytest.mark.parametrize(
    ("rel", "old", "new", "action", "named"),
    [
        ("pkg/ops.py", "def other():\n    return 0", "def other():\n    return 9", CARRY, ""),
        ("pkg/util.py", "def unused():\n    return 2", "def unused():\n    return 3", CARRY, ""),
        ("pkg/config/main.py", "class Unused:\n    pass", "class Unused:\n    x = 1", CARRY, ""),
        ("pkg/config/main.py", "'''The configuration.'''", "'''Documented again.'''", CARRY, ""),
        ("pkg/config/main.py", "cfg: int) -> None", "cfg: float) -> int", CARRY, ""),
        ("pkg/config/main.py", "# kept", "# reworded", CARRY, ""),
        ("pkg/envs.py", "OTHER = 2", "OTHER = 3", CARRY, ""),
        ("pkg/hints.py", "Hint = int", "Hint = float", CARRY, ""),  # annotations only
        ("pkg/ops.py", "cfg.size * SCALE", "cfg.size * SCALE + 1", RUN, "pkg/ops.py::kernel"),
        ("pkg/ops.py", "SCALE = 2", "SCALE = 3", RUN, "pkg/ops.py::kernel"),  # what kernel uses: one level
        ("pkg/config/main.py", "    size = 1", "    size = 2", RUN, "pkg/config/main.py::Config"),  # its base
        ("pkg/config/main.py", "self.cfg = cfg", "self.cfg = -cfg", RUN, "pkg/config/main.py::Config"),
        ("pkg/envs.py", '== "1"', '== "yes"', RUN, "pkg/envs.py::FLAG"),
        ("pkg/raw.py", "return 0", "return 1", RUN, "pkg/raw.py (imported by pkg/worker.py)"),
        ("pkg/broken.py", "def thing(:", "def thing(:\n# any line", RUN, "pkg/broken.py (imported by"),
        ("pkg/worker.py", "import Hint", "import Hint  # the patched file itself", RUN, "pkg/worker.py (patched)"),
    ],
)
def test_a_change_re_proves_only_when_it_touches_what_the_patch_watches(
    tmp_path: Path, rel: str, old: str, new: str, action: str, named: str
) -> None:
    _tree(tmp_path, MODULES)
    before = _watch(tmp_path)
    text = (tmp_path / rel).read_text()
    assert old in text
    (tmp_path / rel).write_text(text.replace(old, new))
    got, reasons = _decision(before, _watch(tmp_path))
    assert got == action, reasons
    if named:
        assert any(f"upstream changed {named}" in r for r in reasons), reasons


def test_watch_files_on_the_target_re_proves_on_any_change_of_an_imported_file(tmp_path: Path) -> None:
    _tree(tmp_path, MODULES)
    before = _watch(tmp_path, by_name=False)
    (tmp_path / "pkg/ops.py").write_text(MODULES["pkg/ops.py"].replace("return 0", "return 9"))
    action, reasons = _decision(before, _watch(tmp_path, by_name=False))
    assert action == RUN and any("upstream changed pkg/ops.py (imported by pkg/worker.py)" in r for r in reasons)


def test_a_lazy_module_s_name_is_its_registry_entry_and_its_getattr() -> None:
    old = (
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    A: bool = False\n    B: int = 0\n\n"
        "registry = {\n    'A': lambda: True,\n    'B': lambda: 1,\n}\n\n\n"
        "def __getattr__(name):\n    return registry[name]()\n"
    )
    assert changed_names(old, old.replace("lambda: 1", "lambda: 2"), ["A", "B"]) == {"B"}
    assert changed_names(old, old.replace("registry[name]()", "registry[name]() or None"), ["A"]) == {"A"}
    assert changed_names(old, old + "\nC = 1\n", ["A", "B"]) == set()
    assert changed_names(old, "def broken(:\n", ["A"]) is None and changed_names(None, old) is None
    module = Module.of("m.py", parse(old))  # type: ignore[arg-type]
    assert module.digest("Z") != module.digest("A")  # absent: answered by __getattr__, still watched


def test_a_file_s_changed_names_land_on_the_night_the_file_does() -> None:
    files = [{"a.py", "b.py"}, {"a.py"}]
    names = [{"a.py": {"a.py::f"}}, {"a.py": {"a.py::g"}}]
    nights = spread(files, 9, seed=3, names=names)
    assert nights[1:] and all(("a.py::f" in n) == ("a.py" in n and i < 5) for i, n in enumerate(nights) if i)
    assert sum("a.py::g" in n for n in nights) == 1
    assert [n - {"a.py::f", "a.py::g"} for n in nights] == spread(files, 9, seed=3)  # the files' nights unchanged


VLLM_FILES = [
    "vllm/__init__.py",
    "vllm/envs.py",
    "vllm/config/__init__.py",
    "vllm/config/vllm.py",
    "vllm/v1/core/kv_cache_utils.py",
    "vllm/v1/kv_cache_interface.py",
    "vllm/utils/math_utils.py",
]


@pytest.mark.network
def test_real_vllm_files_watch_the_names_kv_cache_utils_uses(tmp_path: Path) -> None:
    """kv_cache_utils.py (patched by 08 and u58021) and the modules it imports, copied out of the
    vLLM 0.30.0 sdist from the package index; their change to 0.31.0 per name."""
    from patchset.upstream.changes import release_sources
    from patchset.upstream.releases import probe_index

    problem = probe_index()
    if problem:
        pytest.skip(f"package index unreachable: {problem}")
    old = release_sources("vllm==0.30.0", set(VLLM_FILES))
    assert set(old) == set(VLLM_FILES)
    _tree(tmp_path, {rel: data.decode() for rel, data in old.items()})
    rel = "vllm/v1/core/kv_cache_utils.py"
    got = watched(old[rel].decode(), rel, [], _modules(tmp_path), lambda r: False)
    assert {"vllm/utils/math_utils.py::cdiv", "vllm/v1/kv_cache_interface.py::KVCacheConfig"} <= got.keys()
    assert "vllm/envs.py::VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES" in got  # from vllm import envs; envs.NAME
    assert not {"vllm/envs.py", "vllm/v1/kv_cache_interface.py", "vllm/config/vllm.py"} & got.keys()  # not whole
    new = release_sources("vllm==0.31.0", set(VLLM_FILES))
    names = sorted(k.split("::")[1] for k in got if k.startswith("vllm/v1/kv_cache_interface.py::"))
    before, after = (x["vllm/v1/kv_cache_interface.py"].decode() for x in (old, new))
    moved = changed_names(before, after)
    assert moved is not None and 0 < len(moved) < len(Module.of("", parse(after)).binders)  # type: ignore[arg-type]
    watched_moved = changed_names(before, after, names)
    assert watched_moved is not None and watched_moved <= set(names) and watched_moved <= moved


@pytest.mark.parametrize(("value", "scope"), [(None, WatchScope.NAMES), ('"files"', WatchScope.FILES)])
def test_the_target_s_watch_scope_is_read_from_the_ledger(tmp_path: Path, value: str | None, scope: WatchScope) -> None:
    path = tmp_path / "patches.toml"
    path.write_text("schema = 1\n[targets.demo]\nstrip = 1\n" + (f"watch = {value}\n" if value else ""))
    assert load_ledger(path).targets["demo"].watch is scope


def test_an_unknown_watch_scope_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "patches.toml"
    path.write_text('schema = 1\n[targets.demo]\nwatch = "modules"\n')
    with pytest.raises(LedgerError, match=r"watch.*(names|files)"):
        load_ledger(path)


def test_patches_watching_one_file_whole_and_by_name_are_not_tried_together() -> None:
    from patchset.verify.plan.watch import disjoint

    writes = Watch({"pkg/ops.py": "patched"})
    reads = Watch({"pkg/worker.py": "patched", "pkg/ops.py::kernel": "used by pkg/worker.py"})
    other = Watch({"pkg/util.py": "patched", "pkg/envs.py::FLAG": "used by pkg/util.py"})
    assert not disjoint(writes, reads) and not disjoint(reads, writes)  # dropping ops.py's patch moves kernel
    assert disjoint(writes, other) and disjoint(reads, other)


def test_a_module_nested_deeper_than_the_walk_goes_is_watched_as_its_whole_file() -> None:
    from patchset.verify.plan.watch import key_digest

    deep = "x = " + "[" * 180 + "]" * 180 + "\n\n\ndef f():\n    return x\n"
    assert parse(deep) is not None  # Python parses it; copying or dumping it recurses past the limit
    assert changed_names(deep, deep + "\n", ["f"]) is None  # the change is the whole file's
    assert key_digest(Tree(lambda rel: deep, bool), lambda rel: "file digest", "m.py::f") == "file digest"
