"""Every rule of the lock reader and the ``EXPECTED.sha256`` reader (``patchset.ledger.lock``): a lock
that breaks one is refused naming the file, the line (marked ``# here``) and the key; what the writer
leaves out (empty sections) it leaves out, and what it writes reads back."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from patchset.errors import LedgerError, UnsafePathError
from patchset.ledger.lock import (
    HEADER,
    load_lock,
    parse_expected,
    render_expected,
    render_lock,
    sha256_bytes,
)
from patchset.ledger.model import Lock, TargetLock
from tests.support.ledgers import marked_line

D1, D2 = (hashlib.sha256(s).hexdigest() for s in (b"1", b"2"))
SHA = "0123456789abcdef0123456789abcdef01234567"

# case: (lock text, the key the error names, words of its message, words of its hint)
BAD = {
    "unknown-key": ("schema = 1\nbody = {}  # here\n", "body", "unknown key 'body' in lock", "regenerate it"),
    "schema-2": ("schema = 2  # here\n", "schema", "lock schema version 2 is not supported", "delete it and write"),
    "schema-true": ("schema = true  # here\n", "schema", "lock schema version True is not supported", None),
    "schema-a-string": ('schema = "1"  # here\n', "schema", "lock schema version '1' is not supported", None),
    "bodies-not-a-table": ('bodies = "x"  # here\n', "bodies", "must be a table, not str 'x'", None),
    "body-digest-short": (f'[bodies]\na = "{D1[:-1]}"  # here\n', "bodies.a", "bad sha256", "regenerate"),
    "body-digest-not-a-string": ("[bodies]\na = 1  # here\n", "bodies.a", "bad sha256 1 for body 'a'", None),
    "body-digest-trailing-newline": (f'[bodies]\nb = "{D1}\\n"  # here\n', "bodies.b", "bad sha256", None),
    "head-trailing-newline": (f'[heads]\na = "{SHA}\\n"  # here\n', "heads.a", "bad commit sha", None),
    "body-digest-upper": (f'[bodies]\nb = "{D1.upper()}"  # here\n', "bodies.b", "bad sha256", None),
    "head-short": ('[heads]\na = "abc12"  # here\n', "heads.a", "bad commit sha 'abc12' for 'a'", None),
    "head-not-a-string": ("[heads]\na = 7  # here\n", "heads.a", "bad commit sha 7", None),
    "heads-not-a-table": ("heads = 1  # here\n", "heads", "must be a table, not int 1", None),
    "script-digest": ('[scripts]\ng = "zz"  # here\n', "scripts.g", "bad sha256 'zz' for the script of 'g'", None),
    "scripts-not-a-table": ("scripts = []  # here\n", "scripts", "must be a table, not list", None),
    "targets-not-a-table": ("targets = 1  # here\n", "targets", "must be a table, not int 1", None),
    "target-not-a-table": ("[targets]\nvllm = 1  # here\n", "targets.vllm", "must be a table, not int 1", None),
    "files-not-a-table": ('[targets.vllm]\nfiles = "x"  # here\n', "targets.vllm.files", "must be a table", None),
    "file-digest": (
        f'[targets.vllm.files]\n"a.py" = "{D1}"\n"b.py" = "x"  # here\n',
        "targets.vllm.files.b.py",
        "bad sha256 'x' for b.py",
        None,
    ),
    "base-file-digest": (
        '[targets.vllm.base_files]\n"a.py" = 3  # here\n',
        "targets.vllm.base_files.a.py",
        "bad sha256 3 for a.py",
        None,
    ),
    "target-unknown-key": (
        '[targets.vllm]\nbase = "v"\nhead = "x"  # here\n',
        "targets.vllm.head",
        "unknown key 'head' in lock target 'vllm'",
        None,
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_broken_lock_names_file_line_and_key(tmp_path: Path, case: str) -> None:
    text, key, message, hint = BAD[case]
    path = tmp_path / "patches.lock"
    path.write_text(text)
    with pytest.raises(LedgerError) as exc:
        load_lock(path)
    err = exc.value
    assert err.where is not None and Path(err.where.file) == path
    assert (err.where.line, err.where.key) == (marked_line(text), key), err.render()
    assert message in err.message, err.render()
    if hint is not None:
        assert err.hint is not None and hint in err.hint


def test_a_long_value_is_cut_in_the_message(tmp_path: Path) -> None:
    path = tmp_path / "patches.lock"
    path.write_text(f'bodies = "{"x" * 400}"\n')
    with pytest.raises(LedgerError) as exc:
        load_lock(path)
    said = exc.value.message.split(": ", 2)[-1]
    assert said.startswith("must be a table, not str 'xxx") and len(said) == 200


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("../escape.py", "climbs out with '..'"),
        ("/etc/passwd", "is absolute"),
        (".git/config", "points into a .git directory"),
        (".patchset/journal.json", "patchset's own state"),
    ],
)
@pytest.mark.parametrize("section", ["files", "base_files"])
def test_a_hostile_file_key_is_refused_in_either_section(tmp_path: Path, key: str, said: str, section: str) -> None:
    text = f'schema = 1\n[targets.vllm.{section}]\n"ok.py" = "{D1}"\n"{key}" = "{D2}"  # here\n'
    path = tmp_path / "patches.lock"
    path.write_text(text)
    with pytest.raises(UnsafePathError) as exc:
        load_lock(path)
    assert f"{path}:{marked_line(text)}: targets.vllm.{section}: lock key" in exc.value.message
    assert said in exc.value.message
    assert exc.value.hint is not None and "hostile or damaged" in exc.value.hint


def test_a_binary_lock_is_refused_naming_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "patches.lock"
    path.write_bytes(b"schema = 1\n\xff\xfe")
    with pytest.raises(LedgerError) as exc:
        load_lock(path)
    err = exc.value
    assert err.where is not None and Path(err.where.file) == path and err.where.line is None
    assert "not UTF-8 text" in err.message and "at byte 11" in err.message
    assert err.hint is not None and err.hint.startswith("restore it from version control")


def test_a_missing_lock_and_a_bare_one_are_empty(tmp_path: Path) -> None:
    for text in (None, "", "schema = 1\n"):
        path = tmp_path / "patches.lock"
        if text is not None:
            path.write_text(text)
        lock = load_lock(path)
        assert (lock.bodies, lock.heads, lock.scripts, lock.targets) == ({}, {}, {}, {})


def test_a_target_reads_base_and_both_sections(tmp_path: Path) -> None:
    path = tmp_path / "patches.lock"
    path.write_text(
        f'schema = 1\n[heads]\na = "{SHA[:7]}"\n[targets.vllm]\nbase = "vllm==1"\n'
        f'[targets.vllm.base_files]\n"./pkg//x.py" = "{D1}"\n[targets.vllm.files]\n"pkg/x.py" = "{D2}"\n'
        "[targets.nccl]\n"
    )
    lock = load_lock(path)
    assert lock.heads == {"a": SHA[:7]}
    v = lock.targets["vllm"]
    assert (v.base, v.base_files, v.files) == ("vllm==1", {"./pkg//x.py": D1}, {"pkg/x.py": D2})
    n = lock.targets["nccl"]
    assert (n.base, n.base_files, n.files) == ("", {}, {})


def test_the_writer_leaves_out_what_is_empty(tmp_path: Path) -> None:
    bare = render_lock(Lock())
    assert bare.startswith(f"# {HEADER}\n") and "schema = 1" in bare and "[bodies]" in bare
    for section in ("[heads]", "[scripts]", "[targets"):
        assert section not in bare
    lock = Lock()
    lock.targets["vllm"] = TargetLock(base="", files={"b.py": D2, "a.py": D1})
    text = render_lock(lock)
    assert "base =" not in text and "base_files" not in text
    assert text.index('"a.py"') < text.index('"b.py"')  # sorted: the lock's diffs stay minimal
    path = tmp_path / "patches.lock"
    path.write_text(text)
    back = load_lock(path)
    assert back.targets["vllm"].files == {"a.py": D1, "b.py": D2} and back.targets["vllm"].base == ""
    lock.heads["z"] = SHA
    lock.scripts["g"] = D1
    lock.targets["vllm"].base_files = {"a.py": D2}
    lock.targets["vllm"].base = "vllm==2"
    text = render_lock(lock)
    assert "[heads]" in text and "[scripts]" in text and 'base = "vllm==2"' in text
    assert text.index("[targets.vllm.base_files]") < text.index("[targets.vllm.files]")
    path.write_text(text)
    back = load_lock(path)
    assert (back.heads, back.scripts, back.targets["vllm"].base_files) == ({"z": SHA}, {"g": D1}, {"a.py": D2})


def test_sha256_bytes_is_hashlibs() -> None:
    for data in (b"", b"abc", bytes(range(256))):
        assert sha256_bytes(data) == hashlib.sha256(data).hexdigest()


def test_expected_lines_name_their_line(tmp_path: Path) -> None:
    path = tmp_path / "EXPECTED.sha256"
    text = f"# made by sha256sum\n\n   \n{D1}  ok.py\n{D2}  ../up.py\n"
    with pytest.raises(UnsafePathError) as exc:
        parse_expected(path, text)
    assert f"{path}:5: EXPECTED line" in exc.value.message and "climbs out" in exc.value.message
    with pytest.raises(LedgerError) as bad:
        parse_expected(path, f"{D1}  ok.py\n  # indented comment\nnot a line\n")
    assert bad.value.where is not None and bad.value.where.line == 3


def test_expected_paths_absolute_or_relative(tmp_path: Path) -> None:
    path = tmp_path / "EXPECTED.sha256"
    text = f"{D1}  /usr/lib/.patchset/x.py\n{D2} *./pkg/y.py\n"
    assert parse_expected(path, text) == {"/usr/lib/.patchset/x.py": D1, "pkg/y.py": D2}
    with pytest.raises(UnsafePathError, match="is absolute"):
        parse_expected(path, text, relative=True)
    with pytest.raises(UnsafePathError, match="climbs out"):
        parse_expected(path, f"{D1}  /usr/../etc/x\n")
    with pytest.raises(UnsafePathError, match="own state"):
        parse_expected(path, f"{D1}  .patchset/x\n")


def test_expected_file_read_from_disk_and_written_sorted(tmp_path: Path) -> None:
    path = tmp_path / "EXPECTED.sha256"
    files = {"b/y.py": D2, "a/x.py": D1}
    path.write_text(render_expected(files))
    assert path.read_text() == f"{D1}  a/x.py\n{D2}  b/y.py\n"
    assert parse_expected(path) == files
    path.write_bytes(b"\xff" * 3)
    with pytest.raises(LedgerError) as exc:
        parse_expected(path)
    assert exc.value.where is not None and Path(exc.value.where.file) == path
    assert "not UTF-8 text (byte 0)" in exc.value.message
    assert exc.value.hint is not None and "sha256sum" in exc.value.hint
