"""Confluent's compatibility rules for JSON Schema, on parsed schemas.

Confluent decides whether a reader schema reads what a writer schema allows by walking
both side by side and naming every difference (``TYPE_CHANGED``, ``MAX_LENGTH_DECREASED``,
``OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL`` …); each name is either compatible or not
(:data:`RULES`, Confluent's strict policy, its default). The walk compares the writer
(Confluent's "original") with the reader (its "update"): a backward check of a new schema
against a registered one has the new schema as reader.

Each schema node is first seen as Confluent's loader sees it (a *shape*)::

    true, {}, annotations only   EMPTY      (anything)
    false                        FALSE      (nothing)
    {"$ref": ...}                REF        (resolved when compared; beside other keywords
                                             from 2019-09 on, alone before)
    {"enum": ...} {"const": ...} ENUM CONST
    {"not": ...}                 NOT
    {"anyOf"|"oneOf"|"allOf"}    COMBINED
    {"type": "string"} …         STRING NUMBER (integer is a NUMBER that requires integers)
                                 BOOLEAN NULL OBJECT ARRAY; without "type", the kinds
                                 whose keywords appear
    {"type": ["string", "null"]} COMBINED anyOf of one shape per type
    several of the above         COMBINED allOf of them

Content models: an object is *open* when it lets any other property in (no
``additionalProperties`` or ``true``, no ``patternProperties``, no closing
``unevaluatedProperties``), *partially open* when a schema covers the others
(``patternProperties``, ``additionalProperties: {schema}``), *closed* otherwise. Arrays
likewise with ``additionalItems``/``unevaluatedItems`` after tuple ``items``.

Recursive schemas: a pair of nodes met again while it is being compared counts as
compatible there (its real differences are found where the comparison started).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Final

import referencing
import referencing.exceptions
import referencing.jsonschema

if TYPE_CHECKING:
    # referencing exports its Resolver only from its private module.
    from referencing._core import Resolver


DIFFERENCES_MAX: Final = 100
"""Differences kept per compared pair of nodes, and so per answer: a definition used
along many paths would otherwise name one difference per path, exponentially many."""
PASSES_MAX: Final = 16
"""Passes of the walk over a recursive schema (each feeds the pairs found incompatible
back into the next); the set grows with each pass, so it settles in a few."""
REF_HOPS_MAX: Final = 64
"""A ``$ref`` naming a ``$ref`` naming … more than this many times is read as ``{}``: a
chain that long is a loop (``{"$ref": "#"}``) or a mistake, not a schema."""


MODERN_DRAFTS: Final = frozenset({"2019-09", "2020-12"})
"""Drafts where ``$ref`` applies beside other keywords instead of replacing them, and
``dependentRequired``/``dependentSchemas`` replace ``dependencies``."""

_SPECIFICATIONS: Final = {
    "4": referencing.jsonschema.DRAFT4,
    "6": referencing.jsonschema.DRAFT6,
    "7": referencing.jsonschema.DRAFT7,
    "2019-09": referencing.jsonschema.DRAFT201909,
    "2020-12": referencing.jsonschema.DRAFT202012,
}


@dataclass(frozen=True, slots=True)
class SchemaTree:
    """A parsed schema as the comparison needs it: its root node, a resolver of its
    ``$ref``s scoped at the root, and its draft's name (``"7"``, ``"2020-12"`` …)."""

    root: Any
    resolver: Resolver[Any]
    draft: str


@dataclass(frozen=True, slots=True)
class Rule:
    """One of Confluent's difference names; compatible or not under its strict policy."""

    compatible: bool
    explanation: str


def _incompatible(explanation: str) -> Rule:
    return Rule(False, explanation)


_COMPATIBLE: Final = Rule(True, "")

RULES: Final[dict[str, Rule]] = {
    "SCHEMA_ADDED": _incompatible("the reader has a schema the writer has not"),
    "SCHEMA_REMOVED": _COMPATIBLE,
    "TYPE_CHANGED": _incompatible("the reader's type differs from the writer's"),
    "TYPE_EXTENDED": _COMPATIBLE,
    "TYPE_NARROWED": _incompatible("the reader takes integers only, the writer any number"),
    "MAX_LENGTH_ADDED": _incompatible("the reader has a maxLength the writer has not"),
    "MAX_LENGTH_REMOVED": _COMPATIBLE,
    "MAX_LENGTH_INCREASED": _COMPATIBLE,
    "MAX_LENGTH_DECREASED": _incompatible("the reader's maxLength is below the writer's"),
    "MIN_LENGTH_ADDED": _incompatible("the reader has a minLength the writer has not"),
    "MIN_LENGTH_REMOVED": _COMPATIBLE,
    "MIN_LENGTH_INCREASED": _incompatible("the reader's minLength is above the writer's"),
    "MIN_LENGTH_DECREASED": _COMPATIBLE,
    "PATTERN_ADDED": _incompatible("the reader has a pattern the writer has not"),
    "PATTERN_REMOVED": _COMPATIBLE,
    "PATTERN_CHANGED": _incompatible("the reader's pattern differs from the writer's"),
    "MAXIMUM_ADDED": _incompatible("the reader has a maximum the writer has not"),
    "MAXIMUM_REMOVED": _COMPATIBLE,
    "MAXIMUM_INCREASED": _COMPATIBLE,
    "MAXIMUM_DECREASED": _incompatible("the reader's maximum is below the writer's"),
    "MINIMUM_ADDED": _incompatible("the reader has a minimum the writer has not"),
    "MINIMUM_REMOVED": _COMPATIBLE,
    "MINIMUM_INCREASED": _incompatible("the reader's minimum is above the writer's"),
    "MINIMUM_DECREASED": _COMPATIBLE,
    "EXCLUSIVE_MAXIMUM_ADDED": _incompatible(
        "the reader has an exclusiveMaximum the writer has not"
    ),
    "EXCLUSIVE_MAXIMUM_REMOVED": _COMPATIBLE,
    "EXCLUSIVE_MAXIMUM_INCREASED": _COMPATIBLE,
    "EXCLUSIVE_MAXIMUM_DECREASED": _incompatible(
        "the reader's exclusiveMaximum is below the writer's"
    ),
    "EXCLUSIVE_MINIMUM_ADDED": _incompatible(
        "the reader has an exclusiveMinimum the writer has not"
    ),
    "EXCLUSIVE_MINIMUM_REMOVED": _COMPATIBLE,
    "EXCLUSIVE_MINIMUM_INCREASED": _incompatible(
        "the reader's exclusiveMinimum is above the writer's"
    ),
    "EXCLUSIVE_MINIMUM_DECREASED": _COMPATIBLE,
    "MULTIPLE_OF_ADDED": _incompatible("the reader has a multipleOf the writer has not"),
    "MULTIPLE_OF_REMOVED": _COMPATIBLE,
    "MULTIPLE_OF_EXPANDED": _incompatible("the reader's multipleOf is a multiple of the writer's"),
    "MULTIPLE_OF_REDUCED": _COMPATIBLE,
    "MULTIPLE_OF_CHANGED": _incompatible(
        "the reader's multipleOf and the writer's do not divide one another"
    ),
    "REQUIRED_ATTRIBUTE_ADDED": _incompatible(
        "the reader requires a property, without a default, that the writer does not"
    ),
    "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED": _COMPATIBLE,
    "REQUIRED_ATTRIBUTE_REMOVED": _COMPATIBLE,
    "MAX_PROPERTIES_ADDED": _incompatible("the reader has a maxProperties the writer has not"),
    "MAX_PROPERTIES_REMOVED": _COMPATIBLE,
    "MAX_PROPERTIES_INCREASED": _COMPATIBLE,
    "MAX_PROPERTIES_DECREASED": _incompatible("the reader's maxProperties is below the writer's"),
    "MIN_PROPERTIES_ADDED": _incompatible("the reader has a minProperties the writer has not"),
    "MIN_PROPERTIES_REMOVED": _COMPATIBLE,
    "MIN_PROPERTIES_INCREASED": _incompatible("the reader's minProperties is above the writer's"),
    "MIN_PROPERTIES_DECREASED": _COMPATIBLE,
    "ADDITIONAL_PROPERTIES_ADDED": _COMPATIBLE,
    "ADDITIONAL_PROPERTIES_REMOVED": _incompatible(
        "the reader forbids other properties, the writer allows them"
    ),
    "ADDITIONAL_PROPERTIES_EXTENDED": _COMPATIBLE,
    "ADDITIONAL_PROPERTIES_NARROWED": _incompatible(
        "the reader constrains other properties with a schema, the writer does not"
    ),
    "DEPENDENCY_ARRAY_ADDED": _incompatible(
        "the reader has a property dependency the writer has not"
    ),
    "DEPENDENCY_ARRAY_REMOVED": _COMPATIBLE,
    "DEPENDENCY_ARRAY_EXTENDED": _incompatible(
        "the reader's property dependency names more properties than the writer's"
    ),
    "DEPENDENCY_ARRAY_NARROWED": _COMPATIBLE,
    "DEPENDENCY_ARRAY_CHANGED": _incompatible(
        "the reader's property dependency differs from the writer's"
    ),
    "DEPENDENCY_SCHEMA_ADDED": _incompatible(
        "the reader has a schema dependency the writer has not"
    ),
    "DEPENDENCY_SCHEMA_REMOVED": _COMPATIBLE,
    "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL": _COMPATIBLE,
    "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL": _incompatible(
        "the reader requires a property the writer's open content model may carry"
        " with any value or not at all"
    ),
    "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL": _incompatible(
        "the reader has a property (required, with a default) the writer's open content"
        " model may carry with any value"
    ),
    "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL": _incompatible(
        "the reader has a property the writer's open content model may carry with any value"
        " (close the writer's content model with additionalProperties: false to add"
        " optional properties)"
    ),
    "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL": _incompatible(
        "the reader requires a property, without a default, that the writer does not have"
    ),
    "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL": _COMPATIBLE,
    "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL": _COMPATIBLE,
    "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL": _COMPATIBLE,
    "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL": _COMPATIBLE,
    "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL": _incompatible(
        "the reader's closed content model lacks a property the writer has"
    ),
    "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL": _COMPATIBLE,
    "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL": _incompatible(
        "the reader lacks a property the writer has, and the reader's schema for other"
        " properties does not read it"
    ),
    "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL": _COMPATIBLE,
    "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL": _incompatible(
        "the reader has a property the writer lacks, and it does not read what the"
        " writer's schema for other properties allows"
    ),
    "UNEVALUATED_PROPERTIES_ADDED": _COMPATIBLE,
    "UNEVALUATED_PROPERTIES_REMOVED": _incompatible(
        "the reader forbids unevaluated properties, the writer allows them"
    ),
    "UNEVALUATED_PROPERTIES_EXTENDED": _COMPATIBLE,
    "UNEVALUATED_PROPERTIES_NARROWED": _incompatible(
        "the reader constrains unevaluated properties, the writer does not"
    ),
    "MAX_ITEMS_ADDED": _incompatible("the reader has a maxItems the writer has not"),
    "MAX_ITEMS_REMOVED": _COMPATIBLE,
    "MAX_ITEMS_INCREASED": _COMPATIBLE,
    "MAX_ITEMS_DECREASED": _incompatible("the reader's maxItems is below the writer's"),
    "MIN_ITEMS_ADDED": _incompatible("the reader has a minItems the writer has not"),
    "MIN_ITEMS_REMOVED": _COMPATIBLE,
    "MIN_ITEMS_INCREASED": _incompatible("the reader's minItems is above the writer's"),
    "MIN_ITEMS_DECREASED": _COMPATIBLE,
    "MAX_CONTAINS_ADDED": _incompatible("the reader has a maxContains the writer has not"),
    "MAX_CONTAINS_REMOVED": _COMPATIBLE,
    "MAX_CONTAINS_INCREASED": _COMPATIBLE,
    "MAX_CONTAINS_DECREASED": _incompatible("the reader's maxContains is below the writer's"),
    "MIN_CONTAINS_ADDED": _incompatible("the reader has a minContains the writer has not"),
    "MIN_CONTAINS_REMOVED": _COMPATIBLE,
    "MIN_CONTAINS_INCREASED": _incompatible("the reader's minContains is above the writer's"),
    "MIN_CONTAINS_DECREASED": _COMPATIBLE,
    "UNIQUE_ITEMS_ADDED": _incompatible("the reader needs unique items, the writer does not"),
    "UNIQUE_ITEMS_REMOVED": _COMPATIBLE,
    "ADDITIONAL_ITEMS_ADDED": _COMPATIBLE,
    "ADDITIONAL_ITEMS_REMOVED": _incompatible(
        "the reader forbids items after its tuple, the writer allows them"
    ),
    "ADDITIONAL_ITEMS_EXTENDED": _COMPATIBLE,
    "ADDITIONAL_ITEMS_NARROWED": _incompatible(
        "the reader constrains items after its tuple with a schema, the writer does not"
    ),
    "UNEVALUATED_ITEMS_ADDED": _COMPATIBLE,
    "UNEVALUATED_ITEMS_REMOVED": _incompatible(
        "the reader forbids unevaluated items, the writer allows them"
    ),
    "UNEVALUATED_ITEMS_EXTENDED": _COMPATIBLE,
    "UNEVALUATED_ITEMS_NARROWED": _incompatible(
        "the reader constrains unevaluated items, the writer does not"
    ),
    "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL": _COMPATIBLE,
    "ITEM_ADDED_TO_OPEN_CONTENT_MODEL": _incompatible(
        "the reader has a tuple item the writer's open content model may carry with any value"
    ),
    "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL": _COMPATIBLE,
    "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL": _COMPATIBLE,
    "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL": _COMPATIBLE,
    "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL": _incompatible(
        "the reader's closed content model lacks a tuple item the writer has"
    ),
    "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL": _COMPATIBLE,
    "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL": _incompatible(
        "the reader lacks a tuple item the writer has, and the reader's schema for further"
        " items does not read it"
    ),
    "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL": _COMPATIBLE,
    "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL": _incompatible(
        "the reader has a tuple item the writer lacks, and it does not read what the"
        " writer's schema for further items allows"
    ),
    "ENUM_ARRAY_EXTENDED": _COMPATIBLE,
    "ENUM_ARRAY_NARROWED": _incompatible("the reader's enum lacks values the writer's has"),
    "ENUM_ARRAY_CHANGED": _incompatible("the reader's enum or const differs from the writer's"),
    "COMBINED_TYPE_EXTENDED": _COMPATIBLE,
    "COMBINED_TYPE_CHANGED": _incompatible(
        "the reader combines its subschemas differently (anyOf, oneOf, allOf) from the writer"
    ),
    "PRODUCT_TYPE_EXTENDED": _incompatible("the reader's allOf has more subschemas"),
    "PRODUCT_TYPE_NARROWED": _COMPATIBLE,
    "SUM_TYPE_EXTENDED": _COMPATIBLE,
    "SUM_TYPE_NARROWED": _incompatible("the reader's anyOf or oneOf has fewer subschemas"),
    "COMBINED_TYPE_SUBSCHEMAS_CHANGED": _incompatible(
        "the reader's subschemas cannot each be paired with a writer's subschema it reads"
    ),
    "NOT_TYPE_EXTENDED": _incompatible("the reader's not excludes more than the writer's"),
    "NOT_TYPE_NARROWED": _COMPATIBLE,
}
"""Confluent's difference names (``Difference.Type``) this module finds, each compatible
or not under Confluent's strict policy. Names Confluent only reports for compatible
annotation changes (``TITLE_CHANGED``, ``DESCRIPTION_CHANGED``, ``DEFAULT_CHANGED``,
``ID_CHANGED``) are not looked for."""


@dataclass(frozen=True, slots=True)
class Difference:
    """An incompatible difference at ``path`` (JSON Pointer parts below the compared
    nodes)."""

    name: str
    path: tuple[str, ...]

    def under(self, *prefix: str) -> Difference:
        return Difference(self.name, prefix + self.path)

    def message(self) -> str:
        where = "#/" + "/".join(self.path)
        explanation = RULES[self.name].explanation
        return f'{{errorType:"{self.name}", description:"at \'{where}\': {explanation}"}}'


class Kind(enum.Enum):
    EMPTY = "empty"
    FALSE = "false"
    REF = "$ref"
    ENUM = "enum"
    CONST = "const"
    NOT = "not"
    COMBINED = "combined"
    STRING = "string"
    NUMBER = "number"
    BOOLEAN = "boolean"
    NULL = "null"
    OBJECT = "object"
    ARRAY = "array"


_KINDS_BY_TYPE: Final = {
    "string": Kind.STRING,
    "number": Kind.NUMBER,
    "integer": Kind.NUMBER,
    "boolean": Kind.BOOLEAN,
    "null": Kind.NULL,
    "object": Kind.OBJECT,
    "array": Kind.ARRAY,
}
_KEYWORDS_OF_KIND: Final = {
    Kind.OBJECT: frozenset(
        {
            "properties",
            "required",
            "additionalProperties",
            "patternProperties",
            "dependencies",
            "dependentRequired",
            "dependentSchemas",
            "minProperties",
            "maxProperties",
            "propertyNames",
            "unevaluatedProperties",
        }
    ),
    Kind.ARRAY: frozenset(
        {
            "items",
            "prefixItems",
            "additionalItems",
            "minItems",
            "maxItems",
            "uniqueItems",
            "contains",
            "minContains",
            "maxContains",
            "unevaluatedItems",
        }
    ),
    Kind.STRING: frozenset({"minLength", "maxLength", "pattern", "format"}),
    Kind.NUMBER: frozenset(
        {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
    ),
}
_CRITERIA: Final = ("allOf", "anyOf", "oneOf")


@dataclass(frozen=True, slots=True, eq=False)
class Shape:
    """A schema node as one kind of Confluent's loaded schemas. ``raw`` is the node it
    was read from (several shapes may share one node); ``scope`` resolves its ``$ref``s."""

    kind: Kind
    raw: Any
    scope: Resolver[Any]
    draft: str
    integer: bool = False
    criterion: str = ""
    parts: tuple[Shape, ...] = ()

    @property
    def identity(self) -> tuple[int, Kind, bool, str]:
        return (id(self.raw), self.kind, self.integer, self.criterion)

    def keyword(self, name: str) -> Any:
        return self.raw.get(name) if isinstance(self.raw, dict) else None

    def child(self, raw: Any) -> Shape:
        return shape_of(raw, self.scope, self.draft)


_PairKey = tuple[tuple[int, Kind, bool, str], tuple[int, Kind, bool, str]]


def shape_of(raw: Any, scope: Resolver[Any], draft: str) -> Shape:
    """How Confluent's loader sees the schema node ``raw``."""
    if raw is False:
        return Shape(Kind.FALSE, raw, scope, draft)
    if not isinstance(raw, dict):
        return Shape(Kind.EMPTY, raw, scope, draft)
    subresource = _SPECIFICATIONS[draft].create_resource(raw)
    if subresource.id() is not None:
        scope = scope.in_subresource(subresource)
    if isinstance(raw.get("$ref"), str):
        reference = Shape(Kind.REF, raw, scope, draft)
        if draft not in MODERN_DRAFTS:
            return reference
        parts = [reference]
    else:
        parts = []
    for keyword, kind in (("enum", Kind.ENUM), ("const", Kind.CONST), ("not", Kind.NOT)):
        if keyword in raw:
            parts.append(Shape(kind, raw, scope, draft))
    for criterion in _CRITERIA:
        members = raw.get(criterion)
        if isinstance(members, list):
            parts.append(
                Shape(
                    Kind.COMBINED,
                    raw,
                    scope,
                    draft,
                    criterion=criterion,
                    parts=tuple(shape_of(member, scope, draft) for member in members),
                )
            )
    parts.extend(_typed_parts(raw, scope, draft))
    if not parts:
        return Shape(Kind.EMPTY, raw, scope, draft)
    if len(parts) == 1:
        return parts[0]
    return Shape(Kind.COMBINED, raw, scope, draft, criterion="allOf", parts=tuple(parts))


def _typed_parts(raw: dict[str, Any], scope: Resolver[Any], draft: str) -> list[Shape]:
    declared = raw.get("type")
    if declared is None:
        return [
            Shape(kind, raw, scope, draft)
            for kind, keywords in _KEYWORDS_OF_KIND.items()
            if not keywords.isdisjoint(raw)
        ]
    names = [declared] if isinstance(declared, str) else list(declared)
    typed = [
        Shape(_KINDS_BY_TYPE[name], raw, scope, draft, integer=name == "integer")
        for name in dict.fromkeys(names)
    ]
    if len(typed) == 1:
        return typed
    return [Shape(Kind.COMBINED, raw, scope, draft, criterion="anyOf", parts=tuple(typed))]


def _emit(name: str, *path: str) -> list[Difference]:
    """The difference ``name`` at ``path`` when it is incompatible, else nothing."""
    return [] if RULES[name].compatible else [Difference(name, path)]


def _bound(
    keyword: str, original: Any, update: Any, names: tuple[str, str, str, str]
) -> list[Difference]:
    """Compare a numeric keyword: ``names`` are its ADDED, REMOVED, INCREASED, DECREASED."""
    added, removed, increased, decreased = names
    if not isinstance(original, (int, float)) or isinstance(original, bool):
        original = None
    if not isinstance(update, (int, float)) or isinstance(update, bool):
        update = None
    if original is None and update is None:
        return []
    if original is None:
        return _emit(added, keyword)
    if update is None:
        return _emit(removed, keyword)
    if original < update:
        return _emit(increased, keyword)
    if original > update:
        return _emit(decreased, keyword)
    return []


def _bound_names(prefix: str) -> tuple[str, str, str, str]:
    return (f"{prefix}_ADDED", f"{prefix}_REMOVED", f"{prefix}_INCREASED", f"{prefix}_DECREASED")


def _value_key(value: Any) -> str:
    """A key equal for equal JSON values (``True`` and ``1`` apart)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class _Comparison:
    """One pass of Confluent's walk, remembering the node pairs already compared (so a
    definition used in many places is compared once per pair of nodes) and those being
    compared (a pair met again inside itself reads as its result from the previous pass,
    ``seed``, or as compatible in the first)."""

    def __init__(self, seed: dict[_PairKey, list[Difference]]) -> None:
        self._seed = seed
        self._done: dict[_PairKey, list[Difference]] = {}
        self._active: set[_PairKey] = set()
        self.assumed = False

    def incompatible_pairs(self) -> dict[_PairKey, list[Difference]]:
        return {key: found for key, found in self._done.items() if found}

    def compare(self, original: Shape | None, update: Shape | None) -> list[Difference]:
        if original is None and update is None:
            return []
        if original is None:
            return _emit("SCHEMA_ADDED")
        if update is None:
            return _emit("SCHEMA_REMOVED")
        original = _dereference(original)
        update = _dereference(update)
        key = (original.identity, update.identity)
        if key in self._done:
            return self._done[key]
        if key in self._active:
            self.assumed = True
            return self._seed.get(key, [])
        self._active.add(key)
        try:
            found = self._compare_shapes(original, update)[:DIFFERENCES_MAX]
        finally:
            self._active.discard(key)
        self._done[key] = found
        return found

    def compatible(self, original: Shape | None, update: Shape | None) -> bool:
        return not self.compare(original, update)

    def _compare_shapes(self, original: Shape, update: Shape) -> list[Difference]:
        if self._one_side_combined_reads(original, update):
            return []
        if original.kind is not update.kind:
            if original.kind is Kind.FALSE or update.kind is Kind.EMPTY:
                return []
            if original.keyword("connect.type") == update.keyword("connect.type") == "bytes":
                return []
            return _emit("TYPE_CHANGED")
        compare_kind = _COMPARERS.get(original.kind)
        return compare_kind(self, original, update) if compare_kind else []

    def _one_side_combined_reads(self, original: Shape, update: Shape) -> bool:
        """A plain writer read by a reader's one-member combination, or by one member of
        its anyOf/oneOf (SUM_TYPE_EXTENDED); a writer's one-member combination, or one
        member of its allOf (PRODUCT_TYPE_NARROWED), read by a plain reader."""
        if original.kind is not Kind.COMBINED and update.kind is Kind.COMBINED:
            if len(update.parts) == 1:
                return self.compatible(original, update.parts[0])
            return update.criterion != "allOf" and any(
                self.compatible(original, part) for part in update.parts
            )
        if original.kind is Kind.COMBINED and update.kind is not Kind.COMBINED:
            if len(original.parts) == 1:
                return self.compatible(original.parts[0], update)
            return original.criterion == "allOf" and any(
                self.compatible(part, update) for part in original.parts
            )
        return False

    def _string(self, original: Shape, update: Shape) -> list[Difference]:
        found = _bound(
            "maxLength",
            original.keyword("maxLength"),
            update.keyword("maxLength"),
            _bound_names("MAX_LENGTH"),
        )
        found += _bound(
            "minLength",
            original.keyword("minLength"),
            update.keyword("minLength"),
            _bound_names("MIN_LENGTH"),
        )
        before, after = original.keyword("pattern"), update.keyword("pattern")
        if before is None and after is not None:
            found += _emit("PATTERN_ADDED", "pattern")
        elif before is not None and after is None:
            found += _emit("PATTERN_REMOVED", "pattern")
        elif before != after:
            found += _emit("PATTERN_CHANGED", "pattern")
        return found

    def _number(self, original: Shape, update: Shape) -> list[Difference]:
        found: list[Difference] = []
        for keyword, prefix in (
            ("maximum", "MAXIMUM"),
            ("minimum", "MINIMUM"),
            ("exclusiveMaximum", "EXCLUSIVE_MAXIMUM"),
            ("exclusiveMinimum", "EXCLUSIVE_MINIMUM"),
        ):
            # Draft 4's boolean exclusiveMaximum/Minimum modify maximum/minimum: no limit.
            found += _bound(
                keyword, original.keyword(keyword), update.keyword(keyword), _bound_names(prefix)
            )
        found += _multiple_of(original.keyword("multipleOf"), update.keyword("multipleOf"))
        if original.integer and not update.integer:
            found += _emit("TYPE_EXTENDED")
        elif update.integer and not original.integer:
            found += _emit("TYPE_NARROWED")
        return found

    def _enum(self, original: Shape, update: Shape) -> list[Difference]:
        before = _enum_values(original.keyword("enum"))
        after = _enum_values(update.keyword("enum"))
        if before == after:
            return []
        if after >= before:
            return _emit("ENUM_ARRAY_EXTENDED", "enum")
        if before >= after:
            return _emit("ENUM_ARRAY_NARROWED", "enum")
        return _emit("ENUM_ARRAY_CHANGED", "enum")

    def _const(self, original: Shape, update: Shape) -> list[Difference]:
        if _value_key(original.keyword("const")) == _value_key(update.keyword("const")):
            return []
        return _emit("ENUM_ARRAY_CHANGED", "const")

    def _not(self, original: Shape, update: Shape) -> list[Difference]:
        # What the reader excludes must be excluded by the writer: compare reversed.
        if self.compatible(
            update.child(update.keyword("not")), original.child(original.keyword("not"))
        ):
            return _emit("NOT_TYPE_NARROWED", "not")
        return _emit("NOT_TYPE_EXTENDED", "not")

    def _combined(self, original: Shape, update: Shape) -> list[Difference]:
        found: list[Difference] = []
        if original.criterion != update.criterion:
            original_single, update_single = len(original.parts) == 1, len(update.parts) == 1
            if (
                update.criterion == "anyOf"
                or (original_single and update_single)
                or (original_single and update.criterion == "oneOf")
                or (update_single and original.criterion == "allOf")
            ):
                found += _emit("COMBINED_TYPE_EXTENDED")
            else:
                return _emit("COMBINED_TYPE_CHANGED")
        before = _distinct(original.parts)
        after = _distinct(update.parts)
        if len(before) < len(after):
            found += _emit(
                "PRODUCT_TYPE_EXTENDED" if update.criterion == "allOf" else "SUM_TYPE_EXTENDED"
            )
        elif len(before) > len(after):
            found += _emit(
                "SUM_TYPE_NARROWED" if original.criterion != "allOf" else "PRODUCT_TYPE_NARROWED"
            )
        readable = [
            [j for j, after_part in enumerate(after) if self.compatible(before_part, after_part)]
            for before_part in before
        ]
        if _maximum_matching(readable, len(after)) < min(len(before), len(after)):
            found += _emit("COMBINED_TYPE_SUBSCHEMAS_CHANGED")
        return found

    def _object(self, original: Shape, update: Shape) -> list[Difference]:
        found = self._required(original, update)
        found += self._properties(original, update)
        found += self._dependencies(original, update)
        found += [
            difference.under("additionalProperties")
            for difference in self._additional(
                _additional_properties(original),
                _additional_properties(update),
                original,
                update,
                "ADDITIONAL_PROPERTIES",
            )
        ]
        found += self._unevaluated(original, update, "unevaluatedProperties", "PROPERTIES")
        found += _bound(
            "maxProperties",
            original.keyword("maxProperties"),
            update.keyword("maxProperties"),
            _bound_names("MAX_PROPERTIES"),
        )
        found += _bound(
            "minProperties",
            original.keyword("minProperties"),
            update.keyword("minProperties"),
            _bound_names("MIN_PROPERTIES"),
        )
        return found

    def _required(self, original: Shape, update: Shape) -> list[Difference]:
        found: list[Difference] = []
        before_properties, after_properties = _properties(original), _properties(update)
        before_required, after_required = _required(original), _required(update)
        for name in before_properties:
            if name not in after_properties:
                continue
            if name in before_required and name not in after_required:
                found += _emit("REQUIRED_ATTRIBUTE_REMOVED", "required", name)
            elif name in after_required and name not in before_required:
                found += _emit(
                    "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED"
                    if _has_default(after_properties[name])
                    else "REQUIRED_ATTRIBUTE_ADDED",
                    "required",
                    name,
                )
        return found

    def _properties(self, original: Shape, update: Shape) -> list[Difference]:
        found: list[Difference] = []
        before, after = _properties(original), _properties(update)
        for name in dict.fromkeys([*before, *after]):
            here = ("properties", name)
            if name not in after:
                found += [
                    d.under(*here) for d in self._property_removed(before[name], update, name)
                ]
            elif name not in before:
                found += [d.under(*here) for d in self._property_added(original, update, name)]
            else:
                found += [
                    d.under(*here)
                    for d in self.compare(original.child(before[name]), update.child(after[name]))
                ]
        return found

    def _property_removed(self, removed: Any, update: Shape, name: str) -> list[Difference]:
        if _is_open_object(update):
            return _emit("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
        covering = _covering_property_schema(update, name)
        if covering is not None:
            found = self.compare(update.child(removed), update.child(covering))
            return found + _emit(
                "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                if found
                else "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
            )
        if removed is False:
            return _emit("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
        return _emit("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")

    def _property_added(self, original: Shape, update: Shape, name: str) -> list[Difference]:
        added = _properties(update)[name]
        required = name in _required(update)
        if _is_open_object(original):
            if update.child(added).kind is Kind.EMPTY:
                return _emit("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
            if required:
                return _emit(
                    "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL"
                    if _has_default(added)
                    else "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"
                )
            return _emit("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
        found: list[Difference] = []
        covering = _covering_property_schema(original, name)
        if covering is not None:
            found = self.compare(original.child(covering), update.child(added))
            found += _emit(
                "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                if found
                else "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
            )
        if required:
            found += _emit(
                "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL"
                if _has_default(added)
                else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"
            )
        return found

    def _dependencies(self, original: Shape, update: Shape) -> list[Difference]:
        found: list[Difference] = []
        before_arrays, before_schemas = _dependencies(original)
        after_arrays, after_schemas = _dependencies(update)
        for name in dict.fromkeys([*before_arrays, *after_arrays]):
            here = ("dependencies", name)
            if name not in after_arrays:
                found += _emit("DEPENDENCY_ARRAY_REMOVED", *here)
            elif name not in before_arrays:
                found += _emit("DEPENDENCY_ARRAY_ADDED", *here)
            elif before_arrays[name] != after_arrays[name]:
                if after_arrays[name] >= before_arrays[name]:
                    found += _emit("DEPENDENCY_ARRAY_EXTENDED", *here)
                elif before_arrays[name] >= after_arrays[name]:
                    found += _emit("DEPENDENCY_ARRAY_NARROWED", *here)
                else:
                    found += _emit("DEPENDENCY_ARRAY_CHANGED", *here)
        for name in dict.fromkeys([*before_schemas, *after_schemas]):
            here = ("dependencies", name)
            if name not in after_schemas:
                found += _emit("DEPENDENCY_SCHEMA_REMOVED", *here)
            elif name not in before_schemas:
                found += _emit("DEPENDENCY_SCHEMA_ADDED", *here)
            else:
                found += [
                    d.under(*here)
                    for d in self.compare(
                        original.child(before_schemas[name]), update.child(after_schemas[name])
                    )
                ]
        return found

    def _additional(
        self,
        before: Any,
        after: Any,
        original: Shape,
        update: Shape,
        prefix: str,
    ) -> list[Difference]:
        """``additionalProperties`` or ``additionalItems``: ``False``, a schema, or ``None``
        (absent or ``true``)."""
        if (before is False) != (after is False):
            return _emit(f"{prefix}_REMOVED" if after is False else f"{prefix}_ADDED")
        if before is False:
            return []
        if before is None and after is not None:
            return _emit(f"{prefix}_NARROWED")
        if after is None and before is not None:
            return _emit(f"{prefix}_EXTENDED")
        if before is None:
            return []
        return self.compare(original.child(before), update.child(after))

    def _unevaluated(
        self, original: Shape, update: Shape, keyword: str, suffix: str
    ) -> list[Difference]:
        before, after = original.keyword(keyword), update.keyword(keyword)
        if before is None and after is None:
            return []
        prefix = f"UNEVALUATED_{suffix}"
        before_kind = original.child(before).kind if before is not None else None
        after_kind = update.child(after).kind if after is not None else None
        if before is None:
            name = "REMOVED" if after_kind is Kind.FALSE else "NARROWED"
        elif after is None:
            name = "ADDED" if before_kind is Kind.FALSE else "EXTENDED"
        elif before_kind is Kind.FALSE and after_kind is not Kind.FALSE:
            name = "ADDED"
        elif before_kind is not Kind.FALSE and after_kind is Kind.FALSE:
            name = "REMOVED"
        elif before_kind is Kind.EMPTY and after_kind is not Kind.EMPTY:
            name = "NARROWED"
        elif before_kind is not Kind.EMPTY and after_kind is Kind.EMPTY:
            name = "EXTENDED"
        else:
            return [
                d.under(keyword) for d in self.compare(original.child(before), update.child(after))
            ]
        return _emit(f"{prefix}_{name}", keyword)

    def _array(self, original: Shape, update: Shape) -> list[Difference]:
        before, after = _array_items(original), _array_items(update)
        found = [
            d.under("items")
            for d in self.compare(
                original.child(before.all_items) if before.all_items is not None else None,
                update.child(after.all_items) if after.all_items is not None else None,
            )
        ]
        found += self._tuple(original, update, before, after)
        found += [
            d.under("additionalItems")
            for d in self._additional(
                before.additional,
                after.additional,
                original,
                update,
                "ADDITIONAL_ITEMS",
            )
        ]
        found += self._unevaluated(original, update, "unevaluatedItems", "ITEMS")
        for keyword, prefix in (
            ("maxItems", "MAX_ITEMS"),
            ("minItems", "MIN_ITEMS"),
            ("maxContains", "MAX_CONTAINS"),
            ("minContains", "MIN_CONTAINS"),
        ):
            found += _bound(
                keyword, original.keyword(keyword), update.keyword(keyword), _bound_names(prefix)
            )
        before_unique = original.keyword("uniqueItems") is True
        after_unique = update.keyword("uniqueItems") is True
        if before_unique and not after_unique:
            found += _emit("UNIQUE_ITEMS_REMOVED", "uniqueItems")
        elif after_unique and not before_unique:
            found += _emit("UNIQUE_ITEMS_ADDED", "uniqueItems")
        return found

    def _tuple(
        self, original: Shape, update: Shape, before: _Items, after: _Items
    ) -> list[Difference]:
        found: list[Difference] = []
        for index in range(max(len(before.tuple), len(after.tuple))):
            here = ("items", str(index))
            if index < len(before.tuple) and index < len(after.tuple):
                inner = self.compare(
                    original.child(before.tuple[index]), update.child(after.tuple[index])
                )
            elif index < len(before.tuple):
                inner = self._item_removed(before.tuple[index], update, after)
            else:
                inner = self._item_added(after.tuple[index], original, update, before)
            found += [d.under(*here) for d in inner]
        return found

    def _item_removed(self, removed: Any, update: Shape, after: _Items) -> list[Difference]:
        if _is_open_array(update, after):
            return _emit("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
        covering = _covering_item_schema(update, after)
        if covering is not None:
            found = self.compare(update.child(removed), update.child(covering))
            return found + _emit(
                "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                if found
                else "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
            )
        if removed is False:
            return _emit("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
        return _emit("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL")

    def _item_added(
        self, added: Any, original: Shape, update: Shape, before: _Items
    ) -> list[Difference]:
        if _is_open_array(original, before):
            if update.child(added).kind is Kind.EMPTY:
                return _emit("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
            return _emit("ITEM_ADDED_TO_OPEN_CONTENT_MODEL")
        covering = _covering_item_schema(original, before)
        if covering is None:
            return _emit("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")
        found = self.compare(original.child(covering), update.child(added))
        return found + _emit(
            "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
            if found
            else "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
        )


_COMPARERS: Final = {
    Kind.STRING: _Comparison._string,
    Kind.NUMBER: _Comparison._number,
    Kind.ENUM: _Comparison._enum,
    Kind.CONST: _Comparison._const,
    Kind.NOT: _Comparison._not,
    Kind.COMBINED: _Comparison._combined,
    Kind.OBJECT: _Comparison._object,
    Kind.ARRAY: _Comparison._array,
}


def _dereference(shape: Shape) -> Shape:
    """The shape a REF shape names (Confluent compares what a ``$ref`` refers to)."""
    for _ in range(REF_HOPS_MAX):
        if shape.kind is not Kind.REF:
            return shape
        try:
            resolved = shape.scope.lookup(shape.raw["$ref"])
        except referencing.exceptions.Unresolvable:
            # Parsing refused unresolvable references; a schema stored by another
            # registry may still hold one: it reads as anything.
            return Shape(Kind.EMPTY, shape.raw, shape.scope, shape.draft)
        shape = shape_of(resolved.contents, resolved.resolver, shape.draft)
    return Shape(Kind.EMPTY, shape.raw, shape.scope, shape.draft)


def _multiple_of(before: Any, after: Any) -> list[Difference]:
    original, update = _decimal(before), _decimal(after)
    if original is None and update is None:
        return []
    if original is None:
        return _emit("MULTIPLE_OF_ADDED", "multipleOf")
    if update is None:
        return _emit("MULTIPLE_OF_REMOVED", "multipleOf")
    if original == update:
        return []
    if original != 0 and update % original == 0:
        return _emit("MULTIPLE_OF_EXPANDED", "multipleOf")
    if update != 0 and original % update == 0:
        return _emit("MULTIPLE_OF_REDUCED", "multipleOf")
    return _emit("MULTIPLE_OF_CHANGED", "multipleOf")


def _decimal(value: Any) -> Decimal | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None


def _enum_values(values: Any) -> frozenset[str]:
    return (
        frozenset(_value_key(value) for value in values)
        if isinstance(values, list)
        else frozenset()
    )


def _distinct(parts: Iterable[Shape]) -> list[Shape]:
    """``parts`` without repeats (the same schema written twice counts once)."""
    seen: dict[tuple[str, Kind, bool], Shape] = {}
    for part in parts:
        seen.setdefault((_value_key(part.raw), part.kind, part.integer), part)
    return list(seen.values())


def _maximum_matching(edges: list[list[int]], right_count: int) -> int:
    """The size of a largest matching of the bipartite graph ``edges`` (left node →
    right nodes), by augmenting paths."""
    match_of_right: list[int | None] = [None] * right_count

    def augment(left: int, visited: set[int]) -> bool:
        for right in edges[left]:
            if right in visited:
                continue
            visited.add(right)
            holder = match_of_right[right]
            if holder is None or augment(holder, visited):
                match_of_right[right] = left
                return True
        return False

    return sum(1 for left in range(len(edges)) if augment(left, set()))


def _properties(shape: Shape) -> dict[str, Any]:
    found = shape.keyword("properties")
    return found if isinstance(found, dict) else {}


def _required(shape: Shape) -> set[str]:
    found = shape.keyword("required")
    return {name for name in found if isinstance(name, str)} if isinstance(found, list) else set()


def _has_default(raw: Any) -> bool:
    return isinstance(raw, dict) and "default" in raw


def _additional_properties(shape: Shape) -> Any:
    """``False``, a schema, or ``None`` for absent, ``true`` or ``{}``."""
    found = shape.keyword("additionalProperties")
    return None if found is True or found == {} else found


def _is_open_object(shape: Shape) -> bool:
    if _additional_properties(shape) is not None or shape.keyword("patternProperties"):
        return False
    unevaluated = shape.keyword("unevaluatedProperties")
    return unevaluated is None or shape.child(unevaluated).kind is Kind.EMPTY


def _covering_property_schema(shape: Shape, name: str) -> Any:
    """The schema a partially open object gives property ``name`` it does not list."""
    patterns = shape.keyword("patternProperties")
    if isinstance(patterns, dict):
        for pattern, schema in patterns.items():
            try:
                if re.search(pattern, name):
                    return schema
            except re.error:
                continue
    additional = _additional_properties(shape)
    if additional is not None and additional is not False:
        return additional
    if additional is None and shape.keyword("additionalProperties") is not False:
        unevaluated = shape.keyword("unevaluatedProperties")
        if unevaluated is not None and shape.child(unevaluated).kind not in (
            Kind.EMPTY,
            Kind.FALSE,
        ):
            return unevaluated
    return None


@dataclass(frozen=True, slots=True)
class _Items:
    """An array's item schemas: for every item, for the first ones (a tuple), after them."""

    all_items: Any
    tuple: list[Any]
    additional: Any  # False, a schema, or None for absent / true / {}


def _array_items(shape: Shape) -> _Items:
    items = shape.keyword("items")
    if shape.draft == "2020-12":
        prefix = shape.keyword("prefixItems")
        if isinstance(prefix, list):
            return _Items(None, prefix, _open_as_none(items))
        return _Items(items, [], None)
    if isinstance(items, list):
        return _Items(None, items, _open_as_none(shape.keyword("additionalItems")))
    return _Items(items, [], _open_as_none(shape.keyword("additionalItems")))


def _open_as_none(value: Any) -> Any:
    return None if value is None or value is True or value == {} else value


def _is_open_array(shape: Shape, items: _Items) -> bool:
    if items.additional is not None:
        return False
    unevaluated = shape.keyword("unevaluatedItems")
    return unevaluated is None or shape.child(unevaluated).kind is Kind.EMPTY


def _covering_item_schema(shape: Shape, items: _Items) -> Any:
    if items.additional is not None and items.additional is not False:
        return items.additional
    if items.additional is None:
        unevaluated = shape.keyword("unevaluatedItems")
        if unevaluated is not None and shape.child(unevaluated).kind not in (
            Kind.EMPTY,
            Kind.FALSE,
        ):
            return unevaluated
    return None


def _dependencies(shape: Shape) -> tuple[dict[str, frozenset[str]], dict[str, Any]]:
    """Property dependencies (name → names it requires) and schema dependencies."""
    arrays: dict[str, frozenset[str]] = {}
    schemas: dict[str, Any] = {}
    sources: Iterator[tuple[str, Any]]
    if shape.draft in MODERN_DRAFTS:
        required = shape.keyword("dependentRequired")
        dependent = shape.keyword("dependentSchemas")
        sources = iter(
            [
                *(required.items() if isinstance(required, dict) else []),
                *(dependent.items() if isinstance(dependent, dict) else []),
            ]
        )
    else:
        found = shape.keyword("dependencies")
        sources = iter(found.items() if isinstance(found, dict) else [])
    for name, value in sources:
        if isinstance(value, list):
            arrays[name] = frozenset(item for item in value if isinstance(item, str))
        else:
            schemas[name] = value
    return arrays, schemas


def differences(reader: SchemaTree, writer: SchemaTree) -> list[Difference]:
    """The incompatible differences Confluent finds between a writer and a reader."""
    original = shape_of(writer.root, writer.resolver, writer.draft)
    update = shape_of(reader.root, reader.resolver, reader.draft)
    seed: dict[_PairKey, list[Difference]] = {}
    for _ in range(PASSES_MAX):
        comparison = _Comparison(seed)
        found = comparison.compare(original, update)
        incompatible = comparison.incompatible_pairs()
        if not comparison.assumed or incompatible.keys() == seed.keys():
            break
        seed = incompatible
    return found


def compatibility_errors(reader: SchemaTree, writer: SchemaTree) -> list[str]:
    """Why a reader using ``reader`` cannot read what ``writer`` allows, one message per
    incompatible difference (``{errorType:"NAME", description:"at '#/path': …"}``)."""
    return [difference.message() for difference in differences(reader, writer)]
