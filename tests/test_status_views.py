"""The dashboard in a terminal and in Markdown (issue #27, item 4): the action column gets the
width, a label is said once (no ``held: held:``), ``n/a``/``unknown`` and the mode are explained,
follow-ups and files are shown; Markdown carries the same content, escaped, with http(s) links."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import pytest

from patchset.commands.table import Term
from patchset.tracker.status import make_client, status
from patchset.tracker.views import render_status, to_markdown
from tests.support.fakehub.server import FakeHub
from tests.support.repo import REPO_ROOT
from tests.test_followups import LEDGER, _hub, client


def _text(rep, width: int) -> str:
    buf = io.StringIO()
    render_status(Term(buf, tty=True, width=width, color=False), rep)
    return buf.getvalue()


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("real")
    shutil.copy(REPO_ROOT / "patches.toml", tmp / "patches.toml")
    return status(
        tmp / "patches.toml",
        client=make_client(offline=True, base_url="http://127.0.0.1:9/api/v3", cache_dir=tmp / "cache"),
        histories={},
    )


@pytest.mark.parametrize("width", [100, 120, 200])
def test_labels_are_said_once_and_the_legend_and_mode_are_there(real, width: int) -> None:
    text = _text(real, width)
    flat = " ".join(text.split())
    assert "held: held:" not in flat and "dropped: dropped:" not in flat
    assert "held: Failed the correctness check" in flat and "dropped: Merged upstream on 2026-09-20" in flat
    assert "mode: default (no network: answers cached by earlier `--refresh` runs" in flat
    assert re.search(r"^n/a: no drift to compare", text, re.M) and re.search(r"^unknown: not known yet", text, re.M)
    for line in text.splitlines():
        assert len(line) <= width, line


def test_the_action_gets_the_width(real) -> None:
    """At 120 columns the action of a row reads on one line; other columns move under the row."""
    text = _text(real, 120)
    assert any("drop at next rebase: merged 2026-09-24" in line for line in text.splitlines())
    assert any("upstream it: no upstream PR; or ask tonyd2wild" in line for line in text.splitlines())


def test_follow_ups_files_and_age_in_the_terminal_and_in_markdown(tmp_path: Path) -> None:
    led = tmp_path / "led" / "patches.toml"
    led.parent.mkdir()
    led.write_text(LEDGER.replace('title = "the tile"', 'title = "the tile"\nfiles = ["demo/tile.py"]'))
    data = _hub()
    data["repos"]["acme/demo"]["pulls"]["307"] = {
        "title": "<script>alert(1)</script> [x](javascript:alert(1)) | fixes #202 \x1b[2J",
        "author": "mallory",
        "diff": "",
        "created_at": "2026-09-30T14:00:00Z",
    }
    with FakeHub(data) as hub:
        rep = status(led, refresh=True, client=client(hub, tmp_path), histories={})
    text = _text(rep, 200)
    flat = " ".join(text.split())
    assert "upstream fixed it again: take acme/demo#302 (merged 2026-09-21)" in flat
    assert "upstream reverted it: acme/demo#301 on 2026-09-28" in flat and "reverted it: upstream" not in flat
    wide = " ".join(_text(rep, 600).split())  # one line per row: the follow-ups cell unwrapped
    assert "reverted by acme/demo#301" in wide and "demo/tile.py" in wide and "\x1b" not in text
    assert re.search(r"opened \d+ days ago; last activity 2026-09-21", wide)
    md = to_markdown(rep)
    row = next(ln for ln in md.splitlines() if "`u202`" in ln)
    assert row.count(" | ") == 10  # eleven cells, no cell added by a title
    assert "[acme/demo#302](http" in row and "follow-up open" in row and "`demo/tile.py`" in row
    assert "<script>" not in md and "javascript:" not in md.replace("javascript\\:", "")
    assert "- `n/a`: no drift to compare" in md and "asked GitHub now" in md
