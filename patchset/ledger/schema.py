"""The ledger schema: which keys each table takes, their types and allowed values.

Validation is declarative so that every error has the same shape: file, line, key path, what is
wrong, and the nearest valid key or value as a hint. Unknown keys are errors.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchset.errors import LedgerError, Location
from patchset.ledger.model import (
    DELIVERS,
    ENGINE_PLACEHOLDERS,
    ENGINE_PRESETS,
    GENERATE_PLACEHOLDERS,
    LAYOUTS,
    ORIGINS,
    PR_STATES,
    SCHEMA_VERSION,
    SERVING_CHECKS,
    SOURCE_KINDS,
    SPLICED_PLACEHOLDERS,
    STATES,
    TEST_KINDS,
    WATCH_SCOPES,
)
from patchset.ledger.tomlio import KeyPath, Locator

# \Z, not $: $ also matches before a final newline, and an id or target name "vllm\n" would pass
# (a target name becomes a directory, an id a file name and a line of every report)
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")
REF_RE = re.compile(r"^([A-Za-z0-9_.-]+/)?[A-Za-z0-9_.-]+#\d+\Z")
SHA_RE = re.compile(r"^[0-9a-f]{7,40}\Z")
SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")
# [patch.status] followups: "<class> <their ref> of <our ref>" (tracker.followups.recorded_text)
FOLLOWUP_RE = re.compile(
    r"^(reverted|follow-up-merged|follow-up-open) [A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#\d+ of [A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#\d+\Z"
)
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
GITHUB_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+\Z")
# a target name becomes [targets.<name>], the directory patchset/series/<name>/ and `--into DIR/<name>`
TARGET_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\Z")


@dataclass(frozen=True)
class Field:
    """One key of a table: its type, whether it is required, and an optional extra check."""

    kind: str  # str, int, number, bool, date, list[str], map[str], map[number], table, array
    required: bool = False
    choices: tuple[str, ...] = ()
    check: Callable[[Any], str | None] | None = None
    table: dict[str, Field] | None = None


def _pattern(rx: re.Pattern[str], what: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, str) and v and not rx.match(v):
                return f"{v!r} is not {what}"
        return None

    return check


def _id(value: Any) -> str | None:
    if value == "":
        return "the id is empty: give every patch a name (letters, digits, '.', '_', '-')"
    return _pattern(ID_RE, "an id (letters, digits, '.', '_', '-')")(value)


def _strip(value: Any) -> str | None:
    return f"strip {value} is negative: it counts leading path components to remove (0, 1, ...)" if value < 0 else None


REFS = Field(
    "list[str]", check=_pattern(REF_RE, "an upstream reference like 'vllm-project/vllm#57632' or 'vllm#57632'")
)

UPSTREAM = {
    "prs": REFS,
    "ports": REFS,
    "reverts": REFS,
    "issues": REFS,
    "based_on": REFS,
    "commits": Field("list[str]", check=_pattern(SHA_RE, "a commit sha (7-40 hex digits)")),
}
SOURCE = {
    "kind": Field("str", choices=SOURCE_KINDS),
    "ref": Field("str"),
    "pin": Field("str", check=_pattern(SHA_RE, "a commit sha (7-40 hex digits)")),
    "include": Field("list[str]"),
    "exclude": Field("list[str]"),
    "strip": Field("int", check=_strip),
    "sha256": Field("str", check=_pattern(SHA256_RE, "a sha256 (64 hex digits)")),
    "root": Field("str"),
}
# independent = true: the switch does not interact with another independent switch, so tests that
# turn on only such switches may share one engine start (patchset.verify.plan.configs)
SWITCHES = {"env": Field("map[str]"), "flags": Field("list[str]"), "independent": Field("bool")}
LONGCTX_CHECKS = ("causality", "resume", "cached", "rescore", "reference", "copy")
LONGCTX_MODES = ("fixed", "control")
ENGINE_TEST_KEYS = ("checks", "model", "mode", "baseline", "engine_args", "engine")
SERVING_KEYS = ("warmup", "streams", "max_tokens", "tolerance", "tolerances")


def _at_least(low: int, what: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return f"{what} {value} is less than {low}" if value < low else None

    return check


def _fraction(value: Any) -> str | None:
    values = value.values() if isinstance(value, dict) else [value]
    for v in values:
        if not 0 <= v < 1:
            return f"tolerance {v} is not a fraction in [0, 1) (0.03 is 3%)"
    return None


def _port(value: Any) -> str | None:
    return None if 1 <= value <= 65535 else f"port {value} is not in 1..65535"


def template_problem(text: str, *, whole: bool) -> str | None:
    """Why ``text`` is not a valid engine template, or None. ``whole``: an argv element, where the
    spliced placeholders ({args}, {mounts}) may stand alone."""
    import string

    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as exc:
        return f"template {text!r} is malformed ({exc}); write a literal brace as '{{{{' or '}}}}'"
    for _, name, spec, conv in parts:
        if name is None:
            continue
        if name not in ENGINE_PLACEHOLDERS:
            return (
                f"template {text!r} names an unknown placeholder {{{name}}} (known: {', '.join(ENGINE_PLACEHOLDERS)})"
            )
        if spec or conv:
            return f"template {text!r}: {{{name}}} takes no format spec or conversion"
        if name in SPLICED_PLACEHOLDERS and not (whole and text == f"{{{name}}}"):
            return f"template {text!r}: {{{name}}} stands for several arguments and must be a whole argv element"
    return None


def _template(value: Any) -> str | None:
    if isinstance(value, list):
        for v in value:
            problem = template_problem(v, whole=True)
            if problem:
                return problem
        return None
    values = value.values() if isinstance(value, dict) else [value]
    for v in values:
        problem = template_problem(v, whole=False)
        if problem:
            return problem
    return None


ENGINE = {
    # preset = "vllm-cpu" | "docker" | "command" (the default): the values a preset gives are the
    # defaults of every other key (patchset.verify.engines).
    "preset": Field("str", choices=ENGINE_PRESETS),
    "start": Field("list[str]", check=_template),
    "url": Field("str", check=_template),
    "ready": Field("str"),
    "ready_timeout": Field("int", check=_at_least(1, "ready_timeout")),
    "stop": Field("list[str]", check=_template),
    "logs": Field("list[str]", check=_template),
    "env": Field("map[str]", check=_template),
    "max_parallel": Field("int", check=_at_least(1, "max_parallel")),
    "delivers": Field("str", choices=DELIVERS),
    "host": Field("str"),
    "port": Field("int", check=_port),
    "model": Field("str"),
    "image": Field("str"),
    "notes": Field("str"),
    # production = true: this engine's own defaults are the production configuration (the with-series
    # run on it starts every night; a test that sets arguments or environment on it is a switch)
    "production": Field("bool"),
    # credential variables (patchset.ledger.consent.is_credential) the engine's commands are given
    "pass_env": Field("list[str]", check=_pattern(ENV_NAME_RE, "an environment variable name")),
}
TEST = {
    # kind = "command" (the default) runs `command` in the build tree; kind = "longctx" starts an
    # engine from the build tree and runs the named long-context checks against it; kind = "serving"
    # measures the serving figures users watch on that engine against a baseline.
    "kind": Field("str", choices=TEST_KINDS),
    "command": Field("str"),
    "checks": Field("list[str]"),
    "model": Field("str"),
    "mode": Field("str", choices=LONGCTX_MODES),
    "baseline": Field("str"),
    "engine_args": Field("list[str]"),
    "name": Field("str"),
    "cwd": Field("str"),
    "env": Field("map[str]"),
    "tags": Field("list[str]"),
    "timeout": Field("int"),
    "engine": Field("str"),
    "repeats": Field("int", check=_at_least(1, "repeats")),
    "warmup": Field("int", check=_at_least(0, "warmup")),
    "streams": Field("int", check=_at_least(1, "streams")),
    "max_tokens": Field("int", check=_at_least(2, "max_tokens")),
    "tolerance": Field("number", check=_fraction),
    "tolerances": Field("map[number]", check=_fraction),
}
STATUS = {
    "pr_state": Field("str", choices=PR_STATES),
    "recorded": Field("date"),
    "merged_at": Field("date"),
    "merge_commit": Field("str", check=_pattern(SHA_RE, "a commit sha (7-40 hex digits)")),
    "head": Field("str", check=_pattern(SHA_RE, "a commit sha (7-40 hex digits)")),
    "note": Field("str"),
    "followups": Field(
        "list[str]",
        check=_pattern(FOLLOWUP_RE, "a follow-up like 'reverted vllm-project/vllm#58999 of vllm-project/vllm#57632'"),
    ),
}


# ---- onboarding (issue #25): generated patches and overlays -------------------------------------
_NAMED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def generate_problem(command: list[str]) -> str | None:
    """Why a generate ``command`` cannot run as written, or None: empty, a ``{name}`` that is no
    placeholder (``{tree}`` is an engine's; it would reach the script as the literal text), or a
    ``{ledger}/…`` path that climbs out of the ledger. Other braces (``{}``, ``{0}``, code) are the
    script's own and pass."""
    if not command:
        return "the command is empty: give the program and its arguments"
    known = ", ".join(f"{{{n}}}" for n in GENERATE_PLACEHOLDERS)
    for arg in command:
        for name in _NAMED.findall(arg):
            if name not in GENERATE_PLACEHOLDERS:
                return f"argument {arg!r} names an unknown placeholder {{{name}}} (a generate command knows {known})"
        if arg.startswith("{ledger}/") and ".." in arg[len("{ledger}/") :].split("/"):
            return f"argument {arg!r} climbs out of the ledger directory with '..'"
    return None


def _argv(value: Any) -> str | None:
    return generate_problem(value)


def _absolute(value: Any) -> str | None:
    if value and (not value.startswith("/") or ".." in value.split("/")):
        return f"{value!r} is not an absolute path without '..'"
    return None


# a bind over one of these (or over "/") hides the system the command runs on: refused when the ledger is read
SYSTEM_DIRS = frozenset(
    [
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/var",
        "/usr/bin",
        "/usr/lib",
        "/usr/lib32",
        "/usr/lib64",
        "/usr/libexec",
        "/usr/local",
        "/usr/local/bin",
        "/usr/local/lib",
        "/usr/sbin",
        "/usr/share",
        "/var/lib",
        "/var/run",
    ]
)
BIND_HINT = (
    "bind the copy at the directory the script edits (e.g. /usr/local/lib/python3.12/dist-packages), "
    "or rewrite the script's path as {root}/… so it needs no bind"
)


def system_bind_problem(value: str) -> str | None:
    """Why ``bind = value`` is refused: it would mount the copy over ``/`` or a system directory."""
    norm = "/" + "/".join(p for p in value.split("/") if p not in ("", "."))
    if norm in SYSTEM_DIRS:
        return f"bind over the system directory {norm} is refused: the command would run on a copy of the base in its place"
    return None


def _bind(value: Any) -> str | None:
    return _absolute(value) or (system_bind_problem(value) if value else None)


def _positive(value: Any) -> str | None:
    return f"timeout {value} must be a positive number of seconds" if value <= 0 else None


GENERATE = {
    # argv; "{root}" is a private copy of the target's base tree, "{ledger}" the ledger directory
    "command": Field("list[str]", required=True, check=_argv),
    "script": Field("str"),
    "bind": Field("str", check=_bind),
    "timeout": Field("int", check=_positive),
}
OVERLAY = {"files": Field("list[str]"), "manifest": Field("str")}

PATCH = {
    "id": Field("str", required=True, check=_id),
    "target": Field("str", required=True),
    "title": Field("str", required=True),
    "origin": Field("str", required=True, choices=ORIGINS),
    "body": Field("str"),
    "description": Field("str"),
    "files": Field("list[str]"),
    "authors": Field("list[str]"),
    "porter": Field("str"),
    "state": Field("str", choices=STATES),
    "reason": Field("str"),
    "optional": Field("bool"),
    "notes": Field("str"),
    "upstream": Field("table", table=UPSTREAM),
    "source": Field("table", table=SOURCE),
    "switches": Field("table", table=SWITCHES),
    "status": Field("table", table=STATUS),
    "tests": Field("array", table=TEST),
    # DEP-3 fields an import read and no other key holds, verbatim (Bug-Debian, Forwarded, Origin ...)
    "dep3": Field("map[str]"),
    "tags": Field("list[str]"),
    "generate": Field("table", table=GENERATE),
    "overlay": Field("table", table=OVERLAY),
}
TARGET = {
    "upstream": Field("str"),
    "github": Field("str", check=_pattern(GITHUB_RE, "an 'owner/repo' name")),
    "branch": Field("str"),
    "base": Field("str"),
    "base_version": Field("str"),
    "strip": Field("int", check=_strip),
    "layout": Field("str", choices=LAYOUTS),
    "package": Field("str"),
    "installed_root": Field("str"),
    "base_image": Field("str"),
    "path_map": Field("map[str]"),
    "notes": Field("str"),
    "watch": Field("str", choices=WATCH_SCOPES),
}
TOP = {
    "schema": Field("int", required=True),
    "title": Field("str"),
    "description": Field("str"),
    "targets": Field("map[table]", table=TARGET),
    "engines": Field("map[table]", table=ENGINE),
    "patch": Field("array", table=PATCH),
}

_TYPE_NAMES = {
    "str": "a string",
    "int": "an integer",
    "number": "a number",
    "map[number]": "a table of numbers",
    "bool": "true or false",
    "date": "a date (YYYY-MM-DD)",
    "list[str]": "a list of strings",
    "map[str]": "a table of strings",
    "table": "a table",
    "array": "an array of tables ([[...]])",
    "map[table]": "a table of tables",
}


class Validator:
    """Walks parsed TOML data against the schema, raising the first error with its location."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text
        self._locator: Locator | None = None

    @property
    def locator(self) -> Locator:
        """Built on the first error only: a valid ledger loads without scanning it line by line."""
        if self._locator is None:
            self._locator = Locator(self.text)
        return self._locator

    def fail(self, keypath: KeyPath, message: str, hint: str | None = None) -> LedgerError:
        dotted = ".".join(f"[{k}]" if isinstance(k, int) else str(k) for k in keypath).replace(".[", "[")
        return LedgerError(message, where=Location(self.path, self.locator.line_of(keypath), dotted or None), hint=hint)

    def check_table(self, data: dict[str, Any], spec: dict[str, Field], at: KeyPath) -> None:
        for key, value in data.items():
            if key not in spec:
                import difflib  # only for a message

                near = difflib.get_close_matches(key, list(spec), n=1, cutoff=0.5)
                hint = f"did you mean {near[0]!r}?" if near else f"valid keys here: {', '.join(sorted(spec))}"
                raise self.fail((*at, key), f"unknown key {key!r}", hint)
            self.check_value(value, spec[key], (*at, key))
        for key, fld in spec.items():
            if fld.required and key not in data:
                raise self.fail(at, f"missing required key {key!r}", f"add `{key} = ...` to this table")

    def check_value(self, value: Any, fld: Field, at: KeyPath) -> None:
        ok = {
            "str": lambda v: isinstance(v, str),
            "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "map[number]": lambda v: (
                isinstance(v, dict) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v.values())
            ),
            "bool": lambda v: isinstance(v, bool),
            "date": lambda v: isinstance(v, dt.date) and not isinstance(v, dt.datetime),
            "list[str]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
            "map[str]": lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
            "table": lambda v: isinstance(v, dict),
            "array": lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
            "map[table]": lambda v: isinstance(v, dict) and all(isinstance(x, dict) for x in v.values()),
        }[fld.kind](value)
        if not ok:
            raise self.fail(at, f"expected {_TYPE_NAMES[fld.kind]}, got {type(value).__name__} {value!r}"[:200])
        if fld.choices and value not in fld.choices:
            import difflib  # only for a message

            near = difflib.get_close_matches(str(value), fld.choices, n=1, cutoff=0.4)
            hint = f"did you mean {near[0]!r}?" if near else None
            raise self.fail(at, f"{value!r} is not one of: {', '.join(fld.choices)}", hint)
        if fld.check:
            problem = fld.check(value)
            if problem:
                raise self.fail(at, problem)
        if fld.kind == "table" and fld.table:
            self.check_table(value, fld.table, at)
        elif fld.kind == "array" and fld.table:
            for i, item in enumerate(value):
                self.check_table(item, fld.table, (*at, i))
        elif fld.kind == "map[table]" and fld.table:
            for name, item in value.items():
                self.check_table(item, fld.table, (*at, name))

    def check_document(self, data: dict[str, Any]) -> None:
        self.check_table(data, TOP, ())
        if data["schema"] != SCHEMA_VERSION:
            raise self.fail(
                ("schema",),
                f"schema version {data['schema']} is not supported",
                f"this patchset reads schema {SCHEMA_VERSION}; upgrade patchset or fix the version",
            )
        targets = data.get("targets", {})
        for name in targets:
            if not TARGET_NAME_RE.match(name):
                raise self.fail(
                    ("targets", name),
                    f"target name {name!r} is not a name patchset can use: it becomes the directory "
                    f"patchset/series/<name>/ and `--into DIR/<name>`",
                    "rename the target (and the `target` of its patches): letters, digits and . _ + -, "
                    "starting with a letter or digit (e.g. vllm, python3.11)",
                )
        engines = data.get("engines", {})
        for name, engine in engines.items():
            self.check_engine(name, engine)
        production = [name for name, engine in engines.items() if engine.get("production")]
        if len(production) > 1:
            raise self.fail(
                ("engines", production[1], "production"),
                f"engines {production[0]!r} and {production[1]!r} are both marked production",
                "one engine's defaults are the production configuration: set `production = true` on one only",
            )
        seen: dict[str, int] = {}
        for i, patch in enumerate(data.get("patch", [])):
            pid = patch["id"]
            if pid in seen:
                raise self.fail(
                    ("patch", i, "id"),
                    f"duplicate id {pid!r} (first defined in patch #{seen[pid] + 1})",
                    "ids must be unique: rename one of them",
                )
            seen[pid] = i
            if patch["target"] not in targets:
                import difflib  # only for a message

                near = difflib.get_close_matches(patch["target"], list(targets), n=1, cutoff=0.4)
                raise self.fail(
                    ("patch", i, "target"),
                    f"unknown target {patch['target']!r}",
                    f"did you mean {near[0]!r}?"
                    if near
                    else f"declare [targets.{patch['target']}] or use one of: {', '.join(targets) or '(none)'}",
                )
            state = patch.get("state", "active")
            if state in ("held", "dropped") and not patch.get("reason"):
                raise self.fail(
                    ("patch", i, "state"), f"a {state} patch needs a reason", 'add `reason = "..."` saying why'
                )
            body = patch.get("body")
            if body is not None:
                self.check_inside(body, ("patch", i, "body"))
            for j, test in enumerate(patch.get("tests", [])):
                self.check_test(test, ("patch", i, "tests", j), engines)
            self.check_generate(patch, ("patch", i))

    def check_generate(self, patch: dict[str, Any], at: KeyPath) -> None:
        """A generated patch's script lies inside the ledger directory."""
        script = patch.get("generate", {}).get("script")
        if script:
            self.check_inside(script, (*at, "generate", "script"), root="the ledger directory")

    def check_engine(self, name: str, engine: dict[str, Any]) -> None:
        """An engine needs a way to start (its own `start` or a preset's); a fixed port serves one start at a time."""
        at: KeyPath = ("engines", name)
        if not ID_RE.match(name):
            raise self.fail(at, f"engine name {name!r} is not a name (letters, digits, '.', '_', '-')")
        preset = engine.get("preset", "command")
        if preset == "command" and not engine.get("start"):
            raise self.fail(
                at,
                f"engine {name!r} has no `start` command",
                'add `start = ["./launch.sh", "{tree}", "{port}"]` (an argv template), or a preset: '
                + ", ".join(p for p in ENGINE_PRESETS if p != "command"),
            )
        if "port" in engine and engine.get("max_parallel", 1) > 1:
            raise self.fail(
                (*at, "max_parallel"),
                f"engine {name!r} has a fixed port {engine['port']}: two starts at once would share it",
                "set max_parallel = 1, or drop `port` to get a free port per start",
            )
        ready = engine.get("ready")
        if ready is not None and not ready.startswith("/"):
            raise self.fail((*at, "ready"), f"ready {ready!r} is not a path on the server", 'e.g. ready = "/v1/models"')
        url = engine.get("url")
        if url is not None and not url.startswith(("http://", "https://")):
            raise self.fail((*at, "url"), f"url {url!r} does not start with http:// or https://")

    def check_test(self, test: dict[str, Any], at: KeyPath, engines: dict[str, Any] | None = None) -> None:
        """A command test needs `command`; a long-context or serving test needs known `checks`, no
        `command`, and an engine the ledger defines (or a preset)."""
        kind = test.get("kind", "command")
        if "cwd" in test:
            self.check_inside(test["cwd"], (*at, "cwd"), root="the build tree")
        if kind == "command":
            if not test.get("command"):
                raise self.fail(at, "a command test needs `command`", 'add `command = "..."`, or `kind = "longctx"`')
            for key in (*ENGINE_TEST_KEYS, *SERVING_KEYS, "repeats"):
                if key in test:
                    raise self.fail(
                        (*at, key), f"`{key}` belongs to a test that starts an engine", 'add `kind = "longctx"`'
                    )
            return
        what = "a long-context test" if kind == "longctx" else "a serving test"
        if "command" in test:
            raise self.fail((*at, "command"), f"{what} runs checks, not a command", "remove `command`")
        if kind == "longctx":
            for key in SERVING_KEYS:
                if key in test:
                    raise self.fail((*at, key), f"`{key}` belongs to a serving test", 'use `kind = "serving"`')
        known = LONGCTX_CHECKS if kind == "longctx" else SERVING_CHECKS
        checks = test.get("checks") or []
        if not checks:
            raise self.fail(at, f"{what} needs `checks`", f"name some of: {', '.join(known)}")
        for k, name in enumerate(checks):
            if name not in known:
                import difflib  # only for a message

                near = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
                raise self.fail(
                    (*at, "checks", k),
                    f"unknown {'long-context' if kind == 'longctx' else 'serving'} check {name!r}",
                    f"did you mean {near[0]!r}?" if near else f"one of: {', '.join(known)}",
                )
        for key in test.get("tolerances", {}):
            if key not in checks:
                raise self.fail((*at, "tolerances", key), f"tolerance for {key!r}, a check this test does not run")
        if kind == "serving" and test.get("repeats", 3) < 3:
            raise self.fail((*at, "repeats"), "a serving test needs at least 3 repeats for a confidence interval")
        engine = test.get("engine")
        if engine is not None and engine not in (engines or {}) and engine not in ("vllm-cpu", "docker"):
            import difflib  # only for a message

            names = [*(engines or {}), "vllm-cpu", "docker"]
            near = difflib.get_close_matches(engine, names, n=1, cutoff=0.5)
            raise self.fail(
                (*at, "engine"),
                f"unknown engine {engine!r}",
                f"did you mean {near[0]!r}?"
                if near
                else f"define [engines.{engine}] or use one of: {', '.join(names)}",
            )

    def check_inside(self, rel: str, at: KeyPath, root: str = "the repository") -> None:
        p = Path(rel)
        if not rel or p.is_absolute() or ".." in p.parts or rel.startswith("~"):
            raise self.fail(at, f"path {rel!r} is outside {root}", f"use a path relative to {root}, without '..'")
