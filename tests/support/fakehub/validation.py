"""GraphQL document validation for the fake hub, as strict as GitHub's endpoint.

GitHub runs the GraphQL spec's validation rules on every document before executing it and
answers a document that fails any of them with ``errors`` only (no ``data``): an unused
fragment, a field selected twice with different types under one response key, an unknown
field or argument. The fake's own executor is lenient, so every document is first checked
here with graphql-core's implementation of all the spec's rules against GitHub's published
schema (npm ``@octokit/graphql-schema``, see ``specs``). When that schema is not cached, the
rules that need no schema (unused, unknown and cyclic fragments, unique names…) still run, so
the mistakes that need no type information fail in every test anyway.

Where this differs from GitHub: the two most common messages are reworded as GitHub (on
graphql-ruby) words them ("Fragment X was defined, but not used", "Field 'x' doesn't exist on
type 'T'"); the others are graphql-core's, and ``extensions.code`` is always "validation"
where GitHub names the rule; GitHub also enforces query depth and node limits (500,000 nodes),
which are not checked here.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from graphql import (
    GraphQLError,
    GraphQLField,
    GraphQLObjectType,
    GraphQLSchema,
    GraphQLString,
    parse,
    specified_rules,
    validate,
)
from graphql.validation import (
    ExecutableDefinitionsRule,
    KnownFragmentNamesRule,
    LoneAnonymousOperationRule,
    NoFragmentCyclesRule,
    NoUnusedFragmentsRule,
    NoUnusedVariablesRule,
    UniqueArgumentNamesRule,
    UniqueFragmentNamesRule,
    UniqueOperationNamesRule,
    UniqueVariableNamesRule,
)

from tests.support.fakehub import specs

log = logging.getLogger(__name__)

# The spec's rules that do not look at types: they run even without the published schema.
SCHEMA_FREE_RULES = (
    ExecutableDefinitionsRule,
    UniqueOperationNamesRule,
    LoneAnonymousOperationRule,
    UniqueFragmentNamesRule,
    KnownFragmentNamesRule,
    NoUnusedFragmentsRule,
    NoFragmentCyclesRule,
    UniqueVariableNamesRule,
    NoUnusedVariablesRule,
    UniqueArgumentNamesRule,
)

_PLACEHOLDER = GraphQLSchema(query=GraphQLObjectType("Query", {"_": GraphQLField(GraphQLString)}))


class DocumentValidator:
    """``errors(query)``: GitHub-shaped error objects for a document, empty when it is valid.

    ``schema``: "published" (GitHub's, from the cache; schema-free rules when not cached), a
    ``GraphQLSchema``, or None (schema-free rules only)."""

    def __init__(self, schema: Any = "published") -> None:
        self.mode = "schema-free rules only"
        self.schema: GraphQLSchema | None = None
        if schema == "published":
            try:
                self.schema = specs.graphql_schema()
                self.mode = f"all rules, {specs.GRAPHQL_SCHEMA[0]}@{specs.GRAPHQL_SCHEMA[1]}"
            except specs.Missing as exc:
                log.info("fakehub: %s; GraphQL documents get the schema-free rules only", exc)
        elif isinstance(schema, GraphQLSchema):
            self.schema, self.mode = schema, "all rules, given schema"

    def errors(self, query: str) -> list[dict[str, Any]]:
        try:
            doc = parse(query)
        except GraphQLError:
            return []  # the fake's own parser reports syntax errors in GitHub's words
        if self.schema is not None:
            found = validate(self.schema, doc, specified_rules)
        else:
            found = validate(_PLACEHOLDER, doc, SCHEMA_FREE_RULES)
        return [_shape(e) for e in found]


_GITHUB_WORDS = (
    (re.compile(r"^Fragment '(\w+)' is never used\.$"), r"Fragment \1 was defined, but not used"),
    (re.compile(r"^Cannot query field '(\w+)' on type '(\w+)'\..*$"), r"Field '\1' doesn't exist on type '\2'"),
)


def _shape(e: GraphQLError) -> dict[str, Any]:
    message = e.message
    for rx, words in _GITHUB_WORDS:
        if rx.match(message):
            message = rx.sub(words, message)
            break
    out: dict[str, Any] = {"message": message}
    if e.locations:
        out["locations"] = [{"line": loc.line, "column": loc.column} for loc in e.locations]
    out["extensions"] = {"code": "validation"}
    return out
