"""JSON Schema as Confluent's registry speaks it: parsing, canonical text, values.

A schema's text is JSON whose root is an object or a boolean. Its dialect is the draft its
``$schema`` names (4, 6, 7, 2019-09 or 2020-12, ``http`` or ``https``, with or without the
trailing ``#``); without one, or with one Confluent does not know, it is draft 7, as in
Confluent's registry. Parsing checks the text against its draft's meta-schema and checks
that every ``$ref`` resolves, within the schema or in the schemas it references: each
reference's ``name`` is the URI a ``$ref`` uses for it (also resolved against the root's
``$id``, so ``"address.json"`` is found from a root whose ``$id`` is
``https://example.com/order.json``). Nothing is fetched from the network: a ``$ref`` to
anything else is refused.

Texts, as Confluent writes them::

    canonical()   compact JSON of the text, keys in the order written, numbers as written
                  {"type":"object","properties":{"b":{"type":"string"},"a":{"type":"number"}}}
    normalized()  the same with every object's keys sorted
                  {"properties":{"a":{"type":"number"},"b":{"type":"string"}},"type":"object"}

Values are UTF-8 JSON (compact, as confluent-kafka's ``JSONSerializer`` writes them).
Encoding validates the value against the schema; decoding validates when asked.
Compatibility follows Confluent's rules, in :mod:`sluice.schemas.json_schema_diff`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urljoin, urlsplit

import jsonschema
import jsonschema.exceptions
import jsonschema.protocols
import jsonschema_specifications
import referencing
import referencing.exceptions
import referencing.jsonschema

from sluice.schemas import json_schema_diff
from sluice.schemas.api import InvalidSchema, ParsedSchema, ResolvedReference, SchemaType

if TYPE_CHECKING:
    # referencing exports its Resolver only from its private module.
    from referencing._core import Resolver


SCHEMA_NESTING_DEPTH_MAX: Final = 256
"""Objects and arrays nested deeper than this are refused: the compatibility walk and the
validator recurse once per level, and no real schema comes near it."""


@dataclass(frozen=True, slots=True)
class Draft:
    """One JSON Schema dialect: its name, validator and ``referencing`` specification."""

    name: str
    validator: type[jsonschema.protocols.Validator]
    specification: referencing.Specification[Any]


DRAFT_4: Final = Draft("4", jsonschema.Draft4Validator, referencing.jsonschema.DRAFT4)
DRAFT_6: Final = Draft("6", jsonschema.Draft6Validator, referencing.jsonschema.DRAFT6)
DRAFT_7: Final = Draft("7", jsonschema.Draft7Validator, referencing.jsonschema.DRAFT7)
DRAFT_2019_09: Final = Draft(
    "2019-09", jsonschema.Draft201909Validator, referencing.jsonschema.DRAFT201909
)
DRAFT_2020_12: Final = Draft(
    "2020-12", jsonschema.Draft202012Validator, referencing.jsonschema.DRAFT202012
)
DEFAULT_DRAFT: Final = DRAFT_7
"""Confluent's registry reads a schema without a known ``$schema`` as draft 7."""

_DRAFTS_BY_PATH: Final = {
    "json-schema.org/draft-04/schema": DRAFT_4,
    "json-schema.org/schema": DRAFT_4,
    "json-schema.org/draft-06/schema": DRAFT_6,
    "json-schema.org/draft-07/schema": DRAFT_7,
    "json-schema.org/draft/2019-09/schema": DRAFT_2019_09,
    "json-schema.org/draft/2020-12/schema": DRAFT_2020_12,
}

_DATA_KEYWORDS: Final = frozenset({"enum", "const", "default", "examples"})
"""Keywords whose values are data, not schemas: a ``$ref`` inside them is not a reference."""


def draft_of(root: object) -> Draft:
    """The dialect of a schema: the one its ``$schema`` names, else draft 7."""
    if isinstance(root, dict):
        dialect = root.get("$schema")
        if isinstance(dialect, str):
            path = dialect.rstrip("#").removeprefix("https://").removeprefix("http://")
            return _DRAFTS_BY_PATH.get(path, DEFAULT_DRAFT)
    return DEFAULT_DRAFT


def compact_json(value: object) -> str:
    """``value`` as compact JSON, keys in their order, non-ASCII kept (Jackson's output,
    which Confluent's canonical string is); :class:`~decimal.Decimal` numbers as written."""
    return "".join(_compact_pieces(value))


def _compact_pieces(value: object) -> Iterator[str]:
    if isinstance(value, dict):
        yield "{"
        for index, (key, item) in enumerate(value.items()):
            if index:
                yield ","
            yield _json_string(key)
            yield ":"
            yield from _compact_pieces(item)
        yield "}"
    elif isinstance(value, list):
        yield "["
        for index, item in enumerate(value):
            if index:
                yield ","
            yield from _compact_pieces(item)
        yield "]"
    elif isinstance(value, Decimal):
        yield str(value)
    elif isinstance(value, str):
        yield _json_string(value)
    else:
        yield json.dumps(value, ensure_ascii=False)


def _json_string(text: str) -> str:
    """``text`` as a JSON string, non-ASCII kept, but escaped as ``\\uXXXX`` when it
    holds half a UTF-16 pair (valid JSON, but no UTF-8 encoder writes it)."""
    written = json.dumps(text, ensure_ascii=False)
    try:
        written.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(text)
    return written


def _sorted_keys(value: object) -> object:
    if isinstance(value, dict):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


def _check_depth(value: object, what: str) -> None:
    """Refuse nesting deeper than :data:`SCHEMA_NESTING_DEPTH_MAX`, without recursing."""
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        children: Sequence[object]
        if isinstance(node, dict):
            children = list(node.values())
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > SCHEMA_NESTING_DEPTH_MAX:
            raise InvalidSchema(
                f"{what} nests objects and arrays deeper than {SCHEMA_NESTING_DEPTH_MAX} levels"
            )
        pending.extend((child, depth + 1) for child in children)


def _load_json(text: str, what: str, *, exact_numbers: bool = False) -> Any:
    try:
        if exact_numbers:
            return json.loads(text, parse_float=Decimal)
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidSchema(f"{what} is not valid JSON: {error}") from None
    except RecursionError:
        raise InvalidSchema(f"{what} nests objects and arrays too deeply") from None


def _check_meta_schema(contents: object, draft: Draft, what: str) -> None:
    if not isinstance(contents, (dict, bool)):
        kind = type(contents).__name__ if contents is not None else "null"
        raise InvalidSchema(f"{what} must be a JSON object or a boolean, not {kind}")
    try:
        draft.validator.check_schema(contents)
    except jsonschema.exceptions.SchemaError as error:
        where = "/".join(str(part) for part in error.path) or "(root)"
        raise InvalidSchema(
            f"{what} is not a valid draft {draft.name} JSON Schema at {where}: {error.message}"
        ) from None


def _resource(contents: object, draft: Draft) -> referencing.Resource[Any]:
    return referencing.Resource.from_contents(contents, default_specification=draft.specification)


def _unresolvable_refs(contents: object, resolver: Resolver[Any], draft: Draft) -> list[str]:
    """Every ``$ref`` in ``contents`` (of dialect ``draft``) that ``resolver`` cannot
    resolve, first seen first."""
    missing: list[str] = []
    pending: list[tuple[object, Resolver[Any]]] = [(contents, resolver)]
    while pending:
        node, scope = pending.pop()
        if isinstance(node, list):
            pending.extend((item, scope) for item in reversed(node))
            continue
        if not isinstance(node, dict):
            continue
        if node is not contents:
            subresource = draft.specification.create_resource(node)
            subresource_id = subresource.id()
            if subresource_id is not None:
                urlsplit(subresource_id)  # a ValueError for what is no URL
                scope = scope.in_subresource(subresource)
        reference = node.get("$ref")
        if isinstance(reference, str):
            try:
                scope.lookup(reference)
            except referencing.exceptions.Unresolvable:
                if reference not in missing:
                    missing.append(reference)
        pending.extend(
            (value, scope)
            for key, value in reversed(list(node.items()))
            if key not in _DATA_KEYWORDS
        )
    return missing


@dataclass(frozen=True, eq=False)
class JsonSchema:
    """A parsed JSON Schema. ``root`` is the schema as Python data (floats for numbers);
    ``exact`` the same tree with the numbers as written, for the canonical text."""

    root: Any
    exact: Any
    draft: Draft
    references: tuple[ResolvedReference, ...]
    registry: referencing.Registry[Any]

    @property
    def schema_type(self) -> SchemaType:
        return SchemaType.JSON

    def canonical(self) -> str:
        return compact_json(self.exact)

    def normalized(self) -> JsonSchema:
        exact = _sorted_keys(self.exact)
        return JsonSchema(
            root=_sorted_keys(self.root),
            exact=exact,
            draft=self.draft,
            references=self.references,
            registry=self.registry,
        )

    def record_names(self) -> list[str]:
        title = self.root.get("title") if isinstance(self.root, dict) else None
        return [title] if isinstance(title, str) and title else []

    def resolver(self) -> Resolver[Any]:
        """A resolver of ``$ref``s scoped at the root."""
        return self.registry.resolver_with_root(_resource(self.root, self.draft))

    @functools.cached_property
    def _validator(self) -> Any:
        """The draft's validator of this schema, built once (building costs as much as
        checking a small value)."""
        return self.draft.validator(self.root, registry=self.registry)

    def tree(self) -> json_schema_diff.SchemaTree:
        """The schema as the compatibility rules walk it."""
        return json_schema_diff.SchemaTree(self.root, self.resolver(), self.draft.name)

    def validation_errors(self, value: object) -> list[str]:
        """Why ``value`` does not satisfy the schema (``format`` is not asserted); empty
        when it does. Each message starts with the place in the value."""
        messages = []
        for error in sorted(self._validator.iter_errors(value), key=lambda found: list(found.path)):
            where = "/".join(str(part) for part in error.path)
            messages.append(f"#/{where}: {error.message}")
        return messages


class JsonSchemaFormat:
    """The JSON Schema format (``schemaType`` JSON)."""

    @property
    def schema_type(self) -> SchemaType:
        return SchemaType.JSON

    def parse(self, text: str, references: Sequence[ResolvedReference] = ()) -> JsonSchema:
        root = _load_json(text, "the schema")
        _check_depth(root, "the schema")
        draft = draft_of(root)
        _check_meta_schema(root, draft, "the schema")
        try:
            root_id = _resource(root, draft).id() or ""
            urlsplit(root_id)
            registry: referencing.Registry[Any] = jsonschema_specifications.REGISTRY
            referenced: list[tuple[str, Any, Draft]] = []
            for reference in references:
                what = f"the referenced schema {reference.name!r}"
                contents = _load_json(reference.text, what)
                _check_depth(contents, what)
                reference_draft = draft_of(contents)
                _check_meta_schema(contents, reference_draft, what)
                resource = _resource(contents, reference_draft)
                uris = {reference.name, urljoin(root_id, reference.name)}
                registry = registry.with_resources((uri, resource) for uri in uris)
                referenced.append((reference.name, contents, reference_draft))
            registry = registry.crawl()
            schema = JsonSchema(
                root=root,
                exact=_load_json(text, "the schema", exact_numbers=True),
                draft=draft,
                references=tuple(references),
                registry=registry,
            )
            missing = _unresolvable_refs(root, schema.resolver(), draft)
            for name, contents, reference_draft in referenced:
                missing.extend(
                    reference
                    for reference in _unresolvable_refs(
                        contents, registry.resolver(name), reference_draft
                    )
                    if reference not in missing
                )
        except InvalidSchema:
            raise
        except ValueError as error:  # urllib's, for an $id or $ref it cannot split
            raise InvalidSchema(
                f"the schema has an $id or $ref that is not a URL: {error}"
            ) from None
        if missing:
            raise InvalidSchema(
                "unresolvable $ref: "
                + ", ".join(repr(reference) for reference in missing)
                + " (a schema from elsewhere is given as a reference whose name is that URL)"
            )
        return schema

    def compatibility_errors(self, reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
        if not isinstance(reader, JsonSchema) or not isinstance(writer, JsonSchema):
            return ["Incompatible because of different schema type"]
        return json_schema_diff.compatibility_errors(reader=reader.tree(), writer=writer.tree())

    def decode(self, schema: ParsedSchema, payload: bytes, *, validate: bool = False) -> object:
        """The JSON value in ``payload``; with ``validate``, also checked against
        ``schema`` (as Confluent's deserializer does when asked). Raises ValueError."""
        assert isinstance(schema, JsonSchema)
        try:
            value = json.loads(bytes(payload).decode("utf-8"))
        except UnicodeDecodeError as error:
            raise ValueError(f"the value is not UTF-8: {error}") from None
        except json.JSONDecodeError as error:
            raise ValueError(f"the value is not JSON: {error}") from None
        except RecursionError:
            raise ValueError("the value nests objects and arrays too deeply") from None
        if validate:
            _raise_unless_valid(schema, value)
        return value

    def encode(self, schema: ParsedSchema, value: object) -> bytes:
        assert isinstance(schema, JsonSchema)
        _raise_unless_valid(schema, value)
        try:
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            return text.encode("utf-8")
        except (TypeError, ValueError) as error:
            raise ValueError(f"the value cannot be written as JSON: {error}") from None


def _raise_unless_valid(schema: JsonSchema, value: object) -> None:
    try:
        errors = schema.validation_errors(value)
    except RecursionError:
        raise ValueError("the value nests objects and arrays too deeply") from None
    if errors:
        raise ValueError("the value does not match the schema: " + "; ".join(errors))


FORMAT: Final = JsonSchemaFormat()
