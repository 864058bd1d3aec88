"""The lock's reader and writer (``patchset.ledger.lock``) on every section: what ``render_lock``
writes ``load_lock`` reads back whole, and ``EXPECTED.sha256`` lines as sha256sum writes them."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from patchset.errors import LedgerError
from patchset.ledger.lock import load_lock, parse_expected, render_lock, sha256_file
from patchset.ledger.model import Lock, TargetLock

D1, D2, D3 = (hashlib.sha256(s).hexdigest() for s in (b"1", b"2", b"3"))
HEAD = "0123456789abcdef0123456789abcdef01234567"


def _lock() -> Lock:
    lock = Lock()
    lock.bodies.update({"b": D1, "a": D2})
    lock.heads["a"] = HEAD
    lock.scripts["g"] = D3
    lock.targets["vllm"] = TargetLock(
        base="vllm==0.31.0", base_files={"pkg/x.py": D1}, files={"pkg/x.py": D2, "pkg/y.py": D3}
    )
    lock.targets["nccl"] = TargetLock(base="", files={"src/z.cc": D1})
    return lock


def test_every_section_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "patches.lock"
    path.write_text(render_lock(_lock()))
    got = load_lock(path)
    assert (got.bodies, got.heads, got.scripts) == ({"a": D2, "b": D1}, {"a": HEAD}, {"g": D3})
    assert set(got.targets) == {"vllm", "nccl"}
    v = got.targets["vllm"]
    assert (v.base, v.base_files, v.files) == ("vllm==0.31.0", {"pkg/x.py": D1}, {"pkg/x.py": D2, "pkg/y.py": D3})
    n = got.targets["nccl"]
    assert (n.base, n.base_files, n.files) == ("", {}, {"src/z.cc": D1})
    text = path.read_text()
    assert text.index(f'a = "{D2}"') < text.index(f'b = "{D1}"')  # sorted keys
    assert "[targets.nccl.base_files]" not in text  # an empty section is not written
    assert text.index("[targets.nccl.files]") < text.index("[targets.vllm]")


def test_a_bad_digest_in_a_target_section_names_it(tmp_path: Path) -> None:
    path = tmp_path / "patches.lock"
    path.write_text(f'schema = 1\n[targets.vllm.base_files]\n"pkg/x.py" = "{D1[:-1]}"\n')
    with pytest.raises(LedgerError, match="bad sha256"):
        load_lock(path)


def test_sha256_file_matches_hashlib(tmp_path: Path) -> None:
    data = bytes(range(256)) * 9000  # over a 1 MiB chunk
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()


def test_expected_lines_as_sha256sum_writes_them(tmp_path: Path) -> None:
    text = f"{D1}  ./pkg/x.py\n{D2.upper()} *pkg/y.py\n# a comment\n\n{D3}  pkg/z.py\n"
    assert parse_expected(tmp_path / "EXPECTED.sha256", text) == {"pkg/x.py": D1, "pkg/y.py": D2, "pkg/z.py": D3}
    for bad in (f"{D1}\n", f"{D1[:-1]}  pkg/x.py\n", "x" * 100 + "  pkg/x.py\n"):
        with pytest.raises(LedgerError, match=r"EXPECTED.sha256:1.*not a `<sha256>  <path>` line"):
            parse_expected(tmp_path / "EXPECTED.sha256", bad)
    with pytest.raises(LedgerError) as err:
        parse_expected(tmp_path / "EXPECTED.sha256", "y" * 200 + "\n")
    assert repr("y" * 80) in err.value.message and repr("y" * 81) not in err.value.message
