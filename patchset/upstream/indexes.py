"""Which package indexes to ask for releases: the settings a user already has for pip.

``$PATCHSET_INDEX_URL`` wins; else ``PIP_INDEX_URL`` / ``PIP_EXTRA_INDEX_URL``, and for what they
leave open pip's own answer (``python -m pip config list``: pip's files differ per platform and
venv, so patchset asks rather than reads them); else PyPI. Extra indexes are searched in order and
the first that lists a release wins. A pip that cannot read its configuration is an
EnvironmentFailure, not a quiet fall-back to PyPI. Only the JSON simple API (PEP 691) over
http(s) is spoken: an extra index of another kind is skipped and named.
"""

from __future__ import annotations

import ast
import logging
import os
import subprocess
import sys
from urllib.parse import urlsplit, urlunsplit

from patchset.errors import EnvironmentFailure

__all__ = ["DEFAULT_INDEX_URL", "INDEX_ENV", "index_urls", "shown", "skipped_indexes"]

log = logging.getLogger(__name__)

DEFAULT_INDEX_URL = "https://pypi.org/simple"
INDEX_ENV = "PATCHSET_INDEX_URL"
PIP_INDEX_ENV = "PIP_INDEX_URL"
PIP_EXTRA_ENV = "PIP_EXTRA_INDEX_URL"
PIP_CONFIG_TIMEOUT_S = 15.0
# pip's sections, most specific first: patchset fetches as ``pip download`` does, and a user who
# pointed ``pip install`` at a mirror means that mirror too.
_SECTIONS = ("download", "install", "global")
# what pip's configuration depends on besides PIP_*: the answer is cached per value of these
_PIP_CONTEXT = ("HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "VIRTUAL_ENV", "APPDATA", "PROGRAMDATA")

_pip_answers: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}


def index_urls() -> tuple[str, ...]:
    """The indexes to ask, in order: the main one, then the http(s) extra ones (no trailing ``/``,
    no repeats). The main one is kept whatever it is: a main index patchset cannot read fails with
    its URL in the message rather than quietly becoming PyPI."""
    main, *extra = _configured()
    return (main, *(u for u in extra if _usable(u)))


def skipped_indexes() -> tuple[str, ...]:
    """Configured extra indexes patchset cannot read (not http(s)), for messages."""
    return tuple(u for u in _configured()[1:] if not _usable(u))


def shown(url: str) -> str:
    """``url`` for a message: a password or token in it is replaced by ``***``."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}" if user else f"***@{host}"))


def _configured() -> list[str]:
    own = os.environ.get(INDEX_ENV, "").strip()
    if own:
        return [own.rstrip("/")]
    main = os.environ.get(PIP_INDEX_ENV, "").strip()
    extra = os.environ.get(PIP_EXTRA_ENV, "").strip()
    if not main or not extra:
        conf = _pip_config()
        main = main or _pick(conf, "index-url")
        extra = extra or _pick(conf, "extra-index-url")
    urls = (url.rstrip("/") for url in [main or DEFAULT_INDEX_URL, *extra.split()])  # pip splits a list on whitespace
    return list(dict.fromkeys(url for url in urls if url))


def _usable(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _pick(conf: dict[str, str], name: str) -> str:
    return next((v for section in _SECTIONS if (v := conf.get(f"{section}.{name}", "").strip())), "")


def _pip_config() -> dict[str, str]:
    """``python -m pip config list`` as ``{"global.index-url": value, ...}``, cached per pip
    environment; empty when pip is not installed."""
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_") or k in _PIP_CONTEXT))
    if key not in _pip_answers:
        _pip_answers[key] = _ask_pip()
    return _pip_answers[key]


def _ask_pip() -> dict[str, str]:
    if not sys.executable:
        return {}
    cmd = [sys.executable, "-m", "pip", "config", "list"]
    hint = f"set {INDEX_ENV} to name the index (pip is then not asked)"
    try:
        done = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=PIP_CONFIG_TIMEOUT_S,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentFailure(
            f"`python -m pip config list` did not answer within {PIP_CONFIG_TIMEOUT_S:.0f} s", hint=hint
        ) from None
    except OSError as exc:  # the interpreter itself cannot be started again: no pip to ask
        log.debug("cannot run %s: %s", cmd, exc)
        return {}
    if done.returncode == 0:
        return parse_config_list(done.stdout)
    if "No module named pip" in done.stderr:  # pip is not installed here: there is no pip configuration
        return {}
    said = " ".join("".join(c if c.isprintable() else "?" for c in ln) for ln in done.stderr.splitlines()[-4:])
    raise EnvironmentFailure(
        f"pip cannot read its configuration: {said[:600]}",
        hint=f"fix it (`python -m pip config debug` lists pip's files), or {hint}",
    )


def parse_config_list(text: str) -> dict[str, str]:
    """Parse ``pip config list`` output: one ``section.key='value'`` per line (pip prints the value
    with ``repr``); lines that are not of that form are ignored, as are pip's ``:env:`` entries
    (patchset reads the environment itself)."""
    conf: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, raw = line.partition("=")
        if not sep or name.startswith(":"):
            continue
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, str):
            conf[name.strip()] = value
    return conf
