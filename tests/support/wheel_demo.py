"""The ``build`` demo: a small wheel written the way a build backend writes it (``wheel``'s
WheelFile), a ledger whose series patches it (a path-mapped header, a modified module, a new file),
and its locked, applied tree. Used by the build tests and the output-width tests.
"""

from __future__ import annotations

import difflib
import zipfile
from pathlib import Path

from wheel.wheelfile import WheelFile

ROOT_IN_IMAGE = "/usr/lib/python3/dist-packages"

CORE = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(30))
HEADER = "".join(f"#define DEMO_TILE_{i} {i * 16}\n" for i in range(40))
STOCK = {
    "demo/__init__.py": "from demo.core import f1\n",
    "demo/core.py": CORE,
    "demo/data/include/demo/tile.h": HEADER,
    "demo/unchanged.py": "VALUE = 1\n",
}


def diff(path: str, old: str | None, new: str) -> str:
    a = old.splitlines(keepends=True) if old is not None else []
    lines = list(
        difflib.unified_diff(a, new.splitlines(keepends=True), "/dev/null" if old is None else f"a/{path}", f"b/{path}")
    )
    return "".join(lines)


PATCHES = {
    "01-core": ("demo/core.py", CORE.replace("return x + 7\n", "return x + 7  # patched\n")),
    "02-tile": ("include/demo/tile.h", HEADER.replace("DEMO_TILE_3 48", "DEMO_TILE_3 32")),
    "03-new": ("demo/extra.py", "EXTRA = True\n"),
}
LEDGER = f"""\
schema = 1

[targets.demo]
upstream = "https://example.invalid/demo.git"
github = "example/demo"
base = "1.0"
layout = "installed"
package = "demo-pkg"
installed_root = "{ROOT_IN_IMAGE}"
base_image = "example.invalid/demo-base:1.0"

[targets.demo.path_map]
"include/" = "demo/data/include/"
""" + "".join(
    f'\n[[patch]]\nid = "{pid}"\ntarget = "demo"\ntitle = "{pid}"\norigin = "ours"\nfiles = ["{path}"]\n'
    for pid, (path, _) in PATCHES.items()
)


def make_wheel(path: Path, files: dict[str, str], version: str = "1.0") -> Path:
    """A wheel as a build backend writes it: members, METADATA, WHEEL, RECORD (by WheelFile)."""
    info = f"demo_pkg-{version}.dist-info"
    path.parent.mkdir(parents=True, exist_ok=True)
    with WheelFile(path, "w") as wf:
        for name, text in files.items():
            wf.writestr(name, text)
        wf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: demo-pkg\nVersion: {version}\n\nA demo.\n")
        wf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wf.writestr(f"{info}/top_level.txt", "demo\n")
    return path


def make_demo(tmp_path: Path, run, prefix: str = "") -> dict[str, Path]:
    """A ledger with a locked three-patch series and the stock wheel it applies to (``run`` is the
    CLI fixture; ``prefix`` starts every patch id)."""
    led = tmp_path / "ledger"
    series = led / "patchset/series/demo"
    series.mkdir(parents=True)
    (led / "patches.toml").write_text(LEDGER.replace('id = "', f'id = "{prefix}'))
    stock = {**STOCK}
    for pid, (path, new) in PATCHES.items():
        inst = path.replace("include/", "demo/data/include/", 1)
        (series / f"{prefix}{pid}.patch").write_text(diff(path, stock.get(inst), new))
    wheel = make_wheel(tmp_path / "stock" / "demo_pkg-1.0-py3-none-any.whl", STOCK)
    tree = tmp_path / "tree"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tree)
    r = run("apply", "--tree", tree, "--update-lock", cwd=led)
    assert r.code == 0, r
    return {"ledger": led, "wheel": wheel, "tree": tree}


def make_wheel_with_zeros(path: Path, files: dict[str, str], big: str, mib: int, version: str = "1.0") -> Path:
    """``make_wheel``'s wheel plus one member ``big`` of ``mib`` MiB of zeros with an honest RECORD
    line (hash and size), written a MiB at a time: the file is about ``mib`` KiB and the test
    process never holds the member."""
    import base64
    import hashlib

    info = f"demo_pkg-{version}.dist-info"
    path.parent.mkdir(parents=True, exist_ok=True)
    record: list[str] = []

    def line(name: str, sha: bytes, size: int) -> None:
        record.append(f"{name},sha256={base64.urlsafe_b64encode(sha).rstrip(b'=').decode()},{size}")

    meta = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: demo-pkg\nVersion: {version}\n\nA demo.\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in {**files, **meta}.items():
            data = text.encode()
            zf.writestr(name, data)
            line(name, hashlib.sha256(data).digest(), len(data))
        member = zipfile.ZipInfo(big, date_time=(2024, 1, 1, 0, 0, 0))
        member.compress_type = zipfile.ZIP_DEFLATED
        member.external_attr = 0o100644 << 16
        member.file_size = mib << 20
        h, chunk = hashlib.sha256(), b"\0" * (1 << 20)
        with zf.open(member, "w") as out:
            for _ in range(mib):
                out.write(chunk)
                h.update(chunk)
        line(big, h.digest(), mib << 20)
        record.append(f"{info}/RECORD,,")
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path
