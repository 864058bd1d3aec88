"""A small GraphQL engine: enough of the language to answer real clients' read queries.

The fake hub must answer the query the tracker's client sends (a document with variables,
fragments, aliases and inline fragments) the way GitHub's GraphQL endpoint would, including its
error shapes. Parsing the query for real, rather than pattern-matching one string, means a
client change that asks for a field the fake does not know fails loudly ("Field 'x' doesn't
exist on type 'T'", as GitHub says) instead of silently returning stale shapes.

Supported: queries (named or anonymous) with variables and defaults, aliases, arguments (all
literal kinds), fragment definitions and spreads, inline fragments, ``__typename``, ``@skip`` and
``@include``. Not supported (GitHub supports them; the fake answers with an error): mutations,
subscriptions, introspection beyond ``__typename``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Resolver = Callable[[dict[str, Any]], Any]


class GraphQLSyntaxError(Exception):
    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


class NotFound(Exception):
    """Raised by a resolver: the field becomes null and an error of type NOT_FOUND is reported."""


class ArgumentError(Exception):
    """Raised by a resolver for a bad argument (GitHub reports these as query errors)."""


@dataclass
class Obj:
    """A GraphQL object value: a type name, interfaces it implements, and fields.

    A field is a plain value, or a callable taking the field's arguments (resolved lazily).
    """

    typename: str
    fields: dict[str, Any]
    interfaces: tuple[str, ...] = ()


# ---- lexer ---------------------------------------------------------------------------------
_TOKEN = re.compile(
    r"""
    (?P<ws>[\s,\ufeff]+|\#[^\n]*)
  | (?P<spread>\.\.\.)
  | (?P<punct>[!$():=@\[\]{}|&])
  | (?P<name>[_A-Za-z][_0-9A-Za-z]*)
  | (?P<float>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+))
  | (?P<int>-?(?:0|[1-9][0-9]*))
  | (?P<block>\"\"\"(?:[^"\\]|\\.|"(?!""))*\"\"\")
  | (?P<string>"(?:[^"\\\n]|\\.)*")
    """,
    re.VERBOSE,
)


@dataclass
class Tok:
    kind: str
    value: str
    line: int
    col: int


def tokenize(src: str) -> list[Tok]:
    out: list[Tok] = []
    pos = 0
    line, line_start = 1, 0
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if not m:
            raise GraphQLSyntaxError(f"Parse error on {src[pos]!r}", line, pos - line_start + 1)
        kind = m.lastgroup or ""
        text = m.group()
        if kind != "ws":
            out.append(Tok(kind, text, line, pos - line_start + 1))
        nl = text.count("\n")
        if nl:
            line += nl
            line_start = pos + text.rindex("\n") + 1
        pos = m.end()
    out.append(Tok("eof", "", line, pos - line_start + 1))
    return out


# ---- parser --------------------------------------------------------------------------------
@dataclass
class Field:
    name: str
    alias: str | None
    args: dict[str, Any]
    selections: list[Any] | None
    directives: list[tuple[str, dict[str, Any]]]
    line: int
    col: int

    @property
    def key(self) -> str:
        return self.alias or self.name


@dataclass
class Spread:
    name: str
    directives: list[tuple[str, dict[str, Any]]]
    line: int
    col: int


@dataclass
class Inline:
    on: str | None
    selections: list[Any]
    directives: list[tuple[str, dict[str, Any]]]


@dataclass
class Var:
    name: str


@dataclass
class Operation:
    kind: str
    name: str | None
    var_defaults: dict[str, Any]
    var_required: set[str]
    selections: list[Any]


@dataclass
class Document:
    operations: list[Operation] = field(default_factory=list)
    fragments: dict[str, tuple[str, list[Any]]] = field(default_factory=dict)


class _Parser:
    def __init__(self, src: str) -> None:
        self.toks = tokenize(src)
        self.i = 0

    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def fail(self, what: str) -> GraphQLSyntaxError:
        t = self.tok
        shown = t.value or "end of document"
        return GraphQLSyntaxError(f'Parse error on "{shown}" ({t.kind.upper()}): expected {what}', t.line, t.col)

    def peek(self, value: str) -> bool:
        return self.tok.value == value and self.tok.kind in ("punct", "spread", "name")

    def expect(self, value: str) -> Tok:
        if not self.peek(value):
            raise self.fail(repr(value))
        t = self.tok
        self.i += 1
        return t

    def name(self) -> str:
        if self.tok.kind != "name":
            raise self.fail("a name")
        t = self.tok
        self.i += 1
        return t.value

    def document(self) -> Document:
        doc = Document()
        while self.tok.kind != "eof":
            if self.peek("{"):
                doc.operations.append(Operation("query", None, {}, set(), self.selection_set()))
            elif self.peek("fragment"):
                self.i += 1
                fname = self.name()
                self.expect("on")
                on = self.name()
                self.directives()
                doc.fragments[fname] = (on, self.selection_set())
            elif self.tok.kind == "name" and self.tok.value in ("query", "mutation", "subscription"):
                kind = self.name()
                name = self.name() if self.tok.kind == "name" else None
                defaults: dict[str, Any] = {}
                required: set[str] = set()
                if self.peek("("):
                    self.i += 1
                    while not self.peek(")"):
                        self.expect("$")
                        vname = self.name()
                        self.expect(":")
                        nonnull = self.type_ref()
                        if self.peek("="):
                            self.i += 1
                            defaults[vname] = self.value(const=True)
                        elif nonnull:
                            required.add(vname)
                    self.i += 1
                self.directives()
                doc.operations.append(Operation(kind, name, defaults, required, self.selection_set()))
            else:
                raise self.fail("a definition")
        return doc

    def type_ref(self) -> bool:
        if self.peek("["):
            self.i += 1
            self.type_ref()
            self.expect("]")
        else:
            self.name()
        if self.peek("!"):
            self.i += 1
            return True
        return False

    def selection_set(self) -> list[Any]:
        self.expect("{")
        out: list[Any] = []
        while not self.peek("}"):
            if self.tok.kind == "eof":
                raise self.fail("'}'")
            out.append(self.selection())
        self.i += 1
        return out

    def selection(self) -> Any:
        if self.peek("..."):
            t = self.tok
            self.i += 1
            if self.peek("on"):
                self.i += 1
                on = self.name()
                return Inline(on, self.selection_set(), []) if not self.peek("@") else self._inline_dir(on)
            if self.peek("{") or self.peek("@"):
                dirs = self.directives()
                return Inline(None, self.selection_set(), dirs)
            return Spread(self.name(), self.directives(), t.line, t.col)
        t = self.tok
        first = self.name()
        alias = None
        if self.peek(":"):
            self.i += 1
            alias, first = first, self.name()
        args = self.arguments()
        dirs = self.directives()
        sels = self.selection_set() if self.peek("{") else None
        return Field(first, alias, args, sels, dirs, t.line, t.col)

    def _inline_dir(self, on: str) -> Inline:
        dirs = self.directives()
        return Inline(on, self.selection_set(), dirs)

    def arguments(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.peek("("):
            self.i += 1
            while not self.peek(")"):
                key = self.name()
                self.expect(":")
                out[key] = self.value()
            self.i += 1
        return out

    def directives(self) -> list[tuple[str, dict[str, Any]]]:
        out = []
        while self.peek("@"):
            self.i += 1
            out.append((self.name(), self.arguments()))
        return out

    def value(self, const: bool = False) -> Any:
        t = self.tok
        if t.kind == "punct" and t.value == "$" and not const:
            self.i += 1
            return Var(self.name())
        if t.kind == "int":
            self.i += 1
            return int(t.value)
        if t.kind == "float":
            self.i += 1
            return float(t.value)
        if t.kind == "string":
            self.i += 1
            return _unescape(t.value[1:-1])
        if t.kind == "block":
            self.i += 1
            return t.value[3:-3]
        if t.kind == "name":
            self.i += 1
            return {"true": True, "false": False, "null": None}.get(t.value, t.value)
        if self.peek("["):
            self.i += 1
            items = []
            while not self.peek("]"):
                items.append(self.value(const))
            self.i += 1
            return items
        if self.peek("{"):
            self.i += 1
            obj = {}
            while not self.peek("}"):
                k = self.name()
                self.expect(":")
                obj[k] = self.value(const)
            self.i += 1
            return obj
        raise self.fail("a value")


def _unescape(s: str) -> str:
    return re.sub(r'\\(u[0-9a-fA-F]{4}|["\\/bfnrt])', lambda m: _ESC.get(m.group(1)) or chr(int(m.group(1)[1:], 16)), s)


_ESC = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def parse(src: str) -> Document:
    return _Parser(src).document()


# ---- executor ------------------------------------------------------------------------------
class _QueryError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.error = error


def execute(
    query: str, variables: dict[str, Any] | None, root: Obj, operation_name: str | None = None
) -> dict[str, Any]:
    """Run ``query`` against ``root``; return the response body GitHub would send ({data, errors})."""
    try:
        doc = parse(query)
    except GraphQLSyntaxError as exc:
        return {"errors": [{"message": str(exc), "locations": [{"line": exc.line, "column": exc.column}]}]}
    ops = [o for o in doc.operations if operation_name is None or o.name == operation_name]
    if len(ops) != 1:
        return {
            "errors": [
                {
                    "message": "An operation name is required"
                    if len(ops) > 1
                    else f'No operation named "{operation_name}"'
                }
            ]
        }
    op = ops[0]
    if op.kind != "query":
        return {"errors": [{"message": f"The fake hub answers queries only, not {op.kind}s"}]}
    variables = dict(variables or {})
    missing = [v for v in op.var_required if v not in variables]
    if missing:
        return {
            "errors": [
                {
                    "extensions": {
                        "value": None,
                        "problems": [{"path": [], "explanation": "Expected value to not be null"}],
                    },
                    "message": f"Variable ${missing[0]} of type was provided invalid value",
                }
            ]
        }
    env = {**op.var_defaults, **variables}
    errors: list[dict[str, Any]] = []
    ex = _Executor(doc, env, errors)
    try:
        data = ex.select(root, op.selections, [])
    except _QueryError as exc:
        # Validation-style errors (unknown field, bad argument) fail the whole query, no data.
        return {"errors": [exc.error]}
    out: dict[str, Any] = {"data": data}
    if errors:
        out["errors"] = errors
    return out


class _Executor:
    def __init__(self, doc: Document, env: dict[str, Any], errors: list[dict[str, Any]]) -> None:
        self.doc = doc
        self.env = env
        self.errors = errors

    def resolve_value(self, v: Any) -> Any:
        if isinstance(v, Var):
            return self.env.get(v.name)
        if isinstance(v, list):
            return [self.resolve_value(x) for x in v]
        if isinstance(v, dict):
            return {k: self.resolve_value(x) for k, x in v.items()}
        return v

    def included(self, dirs: list[tuple[str, dict[str, Any]]]) -> bool:
        for name, args in dirs:
            cond = bool(self.resolve_value(args.get("if")))
            if name == "skip" and cond:
                return False
            if name == "include" and not cond:
                return False
        return True

    def applies(self, obj: Obj, on: str | None) -> bool:
        return on is None or on == obj.typename or on in obj.interfaces

    def collect(self, obj: Obj, selections: list[Any], out: list[Field]) -> None:
        for sel in selections:
            if isinstance(sel, Field):
                if self.included(sel.directives):
                    out.append(sel)
            elif isinstance(sel, Inline):
                if self.included(sel.directives) and self.applies(obj, sel.on):
                    self.collect(obj, sel.selections, out)
            elif isinstance(sel, Spread):
                if sel.name not in self.doc.fragments:
                    raise _QueryError(
                        {
                            "message": f"Fragment {sel.name} was used, but not defined",
                            "locations": [{"line": sel.line, "column": sel.col}],
                        }
                    )
                on, sels = self.doc.fragments[sel.name]
                if self.included(sel.directives) and self.applies(obj, on):
                    self.collect(obj, sels, out)

    def select(self, obj: Obj, selections: list[Any], path: list[Any]) -> dict[str, Any]:
        fields: list[Field] = []
        self.collect(obj, selections, fields)
        result: dict[str, Any] = {}
        for f in fields:
            if f.name == "__typename":
                result[f.key] = obj.typename
                continue
            if f.name not in obj.fields:
                raise _QueryError(
                    {
                        "path": ["query", *path, f.key],
                        "extensions": {"code": "undefinedField", "typeName": obj.typename, "fieldName": f.name},
                        "locations": [{"line": f.line, "column": f.col}],
                        "message": f"Field '{f.name}' doesn't exist on type '{obj.typename}'",
                    }
                )
            raw = obj.fields[f.name]
            here = [*path, f.key]
            try:
                value = raw(self.resolve_value(f.args)) if callable(raw) else raw
            except NotFound as exc:
                self.errors.append(
                    {
                        "type": "NOT_FOUND",
                        "path": here,
                        "locations": [{"line": f.line, "column": f.col}],
                        "message": str(exc),
                    }
                )
                result[f.key] = None
                continue
            except ArgumentError as exc:
                raise _QueryError(
                    {"path": ["query", *here], "locations": [{"line": f.line, "column": f.col}], "message": str(exc)}
                ) from None
            result[f.key] = self.complete(value, f, here)
        return result

    def complete(self, value: Any, f: Field, path: list[Any]) -> Any:
        if value is None:
            return None
        if isinstance(value, list):
            return [self.complete(v, f, [*path, i]) for i, v in enumerate(value)]
        if isinstance(value, Obj):
            if f.selections is None:
                raise _QueryError(
                    {
                        "path": ["query", *path],
                        "locations": [{"line": f.line, "column": f.col}],
                        "message": f"Field must have selections (field '{f.name}' returns "
                        f"{value.typename} but has no selections)",
                    }
                )
            return self.select(value, f.selections, path)
        if f.selections is not None:
            raise _QueryError(
                {
                    "path": ["query", *path],
                    "locations": [{"line": f.line, "column": f.col}],
                    "message": f"Selections can't be made on scalars (field '{f.name}')",
                }
            )
        return value
