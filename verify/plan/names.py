"""Which names a patched file uses from the modules it imports, and what defines each of them.

Why this module exists: watching every module a patched file imports re-proves a patch whenever
upstream touches any line of them, and the shared ones (``vllm/config/…``, ``vllm/envs.py``) move
almost every night. What the patched code rests on is narrower: the names it takes from them
(``from vllm.config import VllmConfig`` -> ``VllmConfig``; ``import vllm.envs as envs`` and
``envs.VLLM_X`` -> ``VLLM_X``). A name is watched as its top-level definition in the module that
defines it (a re-export, ``from .vllm import VllmConfig`` in a package's ``__init__``, is followed
to the module it comes from), compared by AST without what does not run (comments, docstrings,
annotations), together with one level of what that definition uses: the top-level definitions of
its own module it names (a base class, a helper, a constant defined beside it). Only names the
patched file uses at run time count (not in annotations, not under ``TYPE_CHECKING``).

Where the scan cannot tell, it watches the whole file, as the import scan did: a module it cannot
read or parse, a star import, a module object used other than by ``module.NAME``. A name a module
does not define at run time is answered by its ``__getattr__``, which is watched instead. What is
not followed is written in docs/verify-plan.md.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

SEP = "::"  # a watched name's key: ``path::NAME``; a key without it is a whole file
MAX_HOPS = 4  # re-exports followed from one module to the next
DIGEST_LEN = 16

Read = Callable[[str], "str | None"]  # tree path -> source text (None: not there or not readable)


def file_of(watched: str) -> str:
    """The file a watched key lies in."""
    return watched.split(SEP, 1)[0]


def parse(source: str | None) -> ast.Module | None:
    if source is None:
        return None
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _stored(node: ast.AST) -> set[str]:
    """Names an expression binds or mutates (``x = ``, ``x.attr = ``, ``x[k] = ``, ``(x := …)``)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, (ast.Store, ast.Del)):
            root = n.value
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if isinstance(root, ast.Name):
                out.add(root.id)
    return out


Binding = tuple[str, str, "ast.AST | None"]  # the conditions around it, an import's text, the statement


def shape(node: ast.AST | None) -> str:
    """What a definition does, as ``ast.dump`` shows it, without what does not run: comments and
    formatting (not in the AST), docstrings, and the annotations of arguments and return values."""
    if node is None:
        return ""
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        if isinstance(n, ast.arg):
            n.annotation = None
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n.returns = None
        body = getattr(n, "body", None)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body and _docstring(body[0]):
            n.body = body[1:] or [ast.Pass()]
    return ast.dump(node)


def _docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


TYPING = "id='TYPE_CHECKING'"  # a binding under ``if TYPE_CHECKING:`` declares a type, it defines nothing


@dataclass
class Module:
    """A parsed module: each top-level name's binding statements, and the imports among them."""

    path: str
    binders: dict[str, list[Binding]] = field(default_factory=dict)
    imports: dict[str, list[tuple[ast.Import | ast.ImportFrom, ast.alias]]] = field(default_factory=dict)
    star: bool = False  # ``from x import *``: any name may come from elsewhere
    uses: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, path: str, tree: ast.Module) -> Module:
        m = cls(path)
        m._bind(tree.body, "")
        return m

    def _bind(self, stmts: Iterable[ast.stmt], guard: str) -> None:
        """Top-level statements (nested in ``if``/``try``/``with`` blocks too, each under the
        conditions around it, never inside a ``def`` or ``class``); an import binds one alias, not
        its whole line."""
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.binders.setdefault(s.name, []).append((guard, "", s))
            elif isinstance(s, (ast.Import, ast.ImportFrom)):
                mod = f"{'.' * (s.level or 0)}{s.module or ''}" if isinstance(s, ast.ImportFrom) else ""
                for a in s.names:
                    if a.name == "*":
                        self.star = True
                        continue
                    bound = a.asname or (a.name if isinstance(s, ast.ImportFrom) else a.name.split(".")[0])
                    self.binders.setdefault(bound, []).append((guard, f"import {mod}:{a.name} as {a.asname}", None))
                    self.imports.setdefault(bound, []).append((s, a))
            elif isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Delete, ast.Expr)):
                for name in _stored(s):
                    self.binders.setdefault(name, []).append((guard, "", s))
            else:  # a compound statement: what its blocks bind, under its header
                fields = list(ast.iter_fields(s))
                blocks = [v for _, v in fields if isinstance(v, list) and v and isinstance(v[0], ast.stmt)]
                handlers = [*getattr(s, "handlers", []), *getattr(s, "cases", [])]
                header = type(s).__name__ + "".join(
                    ast.dump(x)
                    for f, v in fields
                    if f not in ("body", "orelse", "finalbody", "handlers", "cases")
                    for x in (v if isinstance(v, list) else [v])
                    if isinstance(x, ast.AST)
                )
                inner = set().union(*(_stored(b) for v in blocks for b in v), *(_stored(h) for h in handlers))
                for name in _stored(s) - inner:  # a for-target, a with-as
                    self.binders.setdefault(name, []).append((guard, "", s))
                for v in blocks:
                    self._bind(v, guard + header + "|")
                for h in handlers:
                    head = ast.dump(h.type) if isinstance(h, ast.ExceptHandler) and h.type else ""
                    if isinstance(h, ast.ExceptHandler) and h.name:
                        self.binders.setdefault(h.name, []).append((guard, "", h))
                    self._bind(h.body, guard + header + head + "|")

    def used_by(self, name: str) -> set[str]:
        """Top-level names of this module the definitions of ``name`` refer to (one level)."""
        if name not in self.uses:
            refs = {
                n.id
                for _, _, node in self.binders.get(name, [])
                if node
                for n in runtime(node)
                if isinstance(n, ast.Name)
            }
            self.uses[name] = (refs & self.binders.keys()) - {name}
        return self.uses[name]

    def digest(self, name: str) -> str:
        """The definition of ``name`` and of the names of this module it uses, as one digest. A name
        the module does not define at run time (absent, or only declared under ``TYPE_CHECKING``)
        is answered by the module's ``__getattr__``, if any: that, and what it uses, is its digest;
        of a registry it looks names up in (a dict literal with string keys: ``vllm/envs.py``'s
        ``environment_variables``), only the name's entry."""
        h = hashlib.sha256()
        runtime = any(TYPING not in guard for guard, _, _ in self.binders.get(name, []))
        names = [name, *sorted(self.used_by(name))]
        if not runtime:
            names = ["absent", name, "__getattr__", *sorted(self.used_by("__getattr__"))]
        for n in names:
            entry = self._entry(n, name) if not runtime and n not in (name, "__getattr__") else None
            for guard, text, node in self.binders.get(n, []) if entry is None else []:
                h.update(f"{n}\0{guard}\0{text or shape(node)}\0".encode())
            h.update(f"{n}\0{entry or ''}\0".encode())
        return h.hexdigest()[:DIGEST_LEN]

    def _entry(self, registry: str, name: str) -> str | None:
        """``registry[name]`` when ``registry`` is bound once, to a dict literal with string keys."""
        bound = self.binders.get(registry, [])
        node = bound[0][2] if len(bound) == 1 else None
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if not isinstance(value, ast.Dict) or not all(
            isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys
        ):
            return None
        found = [v for k, v in zip(value.keys, value.values, strict=True) if k.value == name]  # type: ignore[union-attr]
        return bound[0][0] + (shape(found[0]) if found else "missing")


def changed_names(old: str | None, new: str | None, names: Iterable[str] | None = None) -> set[str] | None:
    """Of ``names`` (default: every top-level name of either version), those whose digest differs
    between two versions of a module; None when one of them is missing or does not parse (the
    change is the whole file's)."""
    a, b = parse(old), parse(new)
    if a is None or b is None:
        return None
    try:
        ma, mb = Module.of("", a), Module.of("", b)
        wanted = set(names) if names is not None else ma.binders.keys() | mb.binders.keys()
        return {n for n in wanted if ma.digest(n) != mb.digest(n)}
    except RecursionError:  # nested deeper than the walk goes: the whole file's change
        return None


class Tree:
    """The base tree's modules, parsed once: resolves dotted names to files and follows re-exports."""

    def __init__(self, read: Read, exists: Callable[[str], bool]) -> None:
        self.read, self.exists = read, exists
        self.parsed: dict[str, Module | None] = {}

    def module(self, path: str) -> Module | None:
        """The module at ``path``, or None when it cannot be read, parsed or walked (then it is
        watched whole)."""
        if path not in self.parsed:
            tree = parse(self.read(path))
            try:
                self.parsed[path] = Module.of(path, tree) if tree is not None else None
            except RecursionError:
                self.parsed[path] = None
        return self.parsed[path]

    def resolve(self, dotted: str, rel: str) -> str | None:
        """The tree file of a dotted module name imported by ``rel`` (also under a ``src/``-like
        prefix of ``rel``), or None."""
        parts, segs = rel.split("/"), [s for s in dotted.split(".") if s]
        if not segs or any(not s.isidentifier() for s in segs):
            return None
        roots = [""] + (["/".join(parts[: parts.index(segs[0])])] if segs[0] in parts[:-1] else [])
        for root in roots:
            stem = "/".join(([root] if root else []) + segs)
            hit = next((c for c in (f"{stem}.py", f"{stem}/__init__.py") if self.exists(c)), None)
            if hit:
                return hit
        return None

    def watch_name(self, path: str, name: str, why: str, out: dict[str, str], hops: int = 0) -> None:
        """Watch ``name`` of the module at ``path``: its definition there and, when that is an import
        from a module of the tree, the definition it comes from (``MAX_HOPS`` deep)."""
        m = self.module(path)
        if m is None or (m.star and name not in m.binders):
            out.setdefault(path, why)
            return
        out.setdefault(f"{path}{SEP}{name}", why)
        if hops >= MAX_HOPS:
            return
        for node, a in m.imports.get(name, []):
            if isinstance(node, ast.ImportFrom):
                src = absolute(node, path)
                sub = self.resolve(f"{src}.{a.name}", path) if src else None
                there = self.resolve(src, path) if src else None
                if sub:
                    out.setdefault(sub, why)  # the name is a module: all of it
                elif there and there != path:
                    self.watch_name(there, a.name, why, out, hops + 1)
            elif a.asname and (target := self.resolve(a.name, path)):
                out.setdefault(target, why)


def absolute(node: ast.ImportFrom, rel: str) -> str:
    """The dotted module a ``from`` import names, relative ones resolved from ``rel``'s package."""
    if not node.level:
        return node.module or ""
    package = rel.split("/")[:-1]
    keep = len(package) - (node.level - 1)
    if keep < 0:
        return ""
    return ".".join(package[:keep] + ([node.module] if node.module else []))


def runtime(tree: ast.AST) -> list[ast.AST]:
    """The nodes of a module that run: not its annotations, not the body of ``if TYPE_CHECKING:``."""
    out, todo = [], [tree]
    while todo:
        n = todo.pop()
        out.append(n)
        for f, v in ast.iter_fields(n):
            if f in ("annotation", "returns") or (isinstance(n, ast.If) and f == "body" and TYPING in ast.dump(n.test)):
                continue
            todo += [c for c in (v if isinstance(v, list) else [v]) if isinstance(c, ast.AST)]
    return out


def _chains(nodes: list[ast.AST]) -> list[list[str]]:
    """Every outermost attribute chain rooted at a name, as ``[name, attr, attr, …]`` (a lone name
    is a chain of one)."""
    inner = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}
    out = []
    for n in nodes:
        if isinstance(n, (ast.Attribute, ast.Name)) and id(n) not in inner:
            chain: list[str] = []
            while isinstance(n, ast.Attribute):
                chain.append(n.attr)
                n = n.value
            if isinstance(n, ast.Name):
                out.append([n.id, *reversed(chain)])
    return out


def _read_off(chains: list[list[str]], dotted: str) -> set[str] | None:
    """The names read off the module ``dotted`` (``dotted.NAME``), or None when the module, or a
    package on its way, is used otherwise (passed, ``getattr``-ed): then all of it may be read."""
    segs = dotted.split(".")
    names: set[str] = set()
    for c in chains:
        if c[: len(segs)] == segs and len(c) > len(segs):
            names.add(c[len(segs)])
        elif len(c) <= len(segs) and c == segs[: len(c)]:
            return None
    return names


CHAIN = re.compile(r"[A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*")


def chains_in(lines: Iterable[str]) -> list[list[str]]:
    """The dotted chains of lines a patch adds (fragments ``ast`` may not parse: every word counts,
    in strings and comments too, which only watches more; import lines are parsed instead)."""
    code = [line for line in lines if not line.lstrip().startswith(("import ", "from "))]
    return [[w.strip() for w in m.group().split(".")] for line in code for m in CHAIN.finditer(line)]


def watched_names(
    tree: ast.Module, rel: str, modules: Tree, why: str, added: Iterable[str] = (), extra: Iterable[ast.Module] = ()
) -> dict[str, str]:
    """What the patched file ``rel`` rests on among the modules it imports: its parsed source, the
    lines the series adds to it (``added``) and their import statements (``extra``, parsed).
    ``{key: why}``, a key being ``path::NAME`` or a whole file (``path``). Only what runs counts: a
    name the file uses in annotations only, or imports under ``TYPE_CHECKING``, is not watched
    (unless the file re-exports it: an ``__init__.py``, ``__all__``)."""
    out: dict[str, str] = {}
    nodes = runtime(tree)
    chains = _chains(nodes) + chains_in(added)
    used = {c[0] for c in chains} | {
        c.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and "__all__" in _stored(n)
        for c in ast.walk(n.value)
        if isinstance(c, ast.Constant) and isinstance(c.value, str)
    }
    reexports = rel.endswith("__init__.py")

    def module_use(target: str, local: str) -> None:
        names = _read_off(chains, local)
        if names is None:
            out.setdefault(target, why)
        for name in sorted(names or ()):
            modules.watch_name(target, name, why, out)

    for node in [*nodes, *(n for t in extra for n in ast.walk(t))]:
        if isinstance(node, ast.ImportFrom):
            src = absolute(node, rel)
            there = modules.resolve(src, rel) if src else None
            for a in node.names:
                sub = modules.resolve(f"{src}.{a.name}", rel) if src and a.name != "*" else None
                if a.name == "*":
                    if there:
                        out.setdefault(there, why)
                    continue
                if not reexports and (a.asname or a.name) not in used:
                    continue
                if sub and sub != rel:  # ``from pkg import mod``: what it reads of mod, and pkg's mod
                    module_use(sub, a.asname or a.name)
                if there and there != rel:
                    modules.watch_name(there, a.name, why, out)
        elif isinstance(node, ast.Import):
            for a in node.names:
                target = modules.resolve(a.name, rel)
                if target and target != rel:
                    module_use(target, a.asname or a.name)
    return out
