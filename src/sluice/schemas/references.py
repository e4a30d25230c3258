"""Resolving a schema's references: every schema it references, directly or not, each
once, dependencies before the schemas that use them (what a format's ``parse`` takes).

One algorithm for the registry (over its state), the broker's schema validation and the
client (over the REST API). It is written once, as a generator that asks for each
referenced schema and is told it, and driven by :func:`resolve` (a synchronous fetch)
or :func:`resolve_async` (an awaitable one)::

    references ──▶ resolution ──yield Reference──▶ fetch(reference) ──▶ FetchedSchema
                      ▲                                                 (or None)
                      └────────────── send ─────────────────────────────────┘

Each (subject, version) is fetched and expanded once per resolution, however many
schemas reference it (a diamond: A→B, A→C, B→D, C→D fetches D once), so the cost grows
with the number of distinct schemas, never with the number of paths to them; at most
:data:`REFERENCED_SCHEMAS_MAX` distinct schemas are fetched, and the walk keeps its own
stack (no recursion, however deep references nest). A reference cycle (which a registry
cannot create, but a hand-written topic could hold) ends where it meets a schema already
being resolved.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Final

from sluice.schemas.api import InvalidSchema, Reference, ResolvedReference

REFERENCED_SCHEMAS_MAX: Final = 1000
"""Distinct schemas (subject and version) one schema may bring in through its references,
directly or not; more is refused (:class:`TooManyReferences`): a registry gone wrong, or
a schema built to make every parse of it expensive."""


@dataclass(frozen=True, slots=True)
class FetchedSchema:
    """A referenced schema: its text and its own references."""

    text: str
    references: Sequence[Reference] = ()


class ReferenceNotFound(InvalidSchema):
    """A reference names a subject version that does not exist."""

    def __init__(self, reference: Reference) -> None:
        super().__init__(
            f"Invalid schema: reference {reference.name} to subject "
            f"'{reference.subject}' version {reference.version} was not found"
        )
        self.reference = reference


class TooManyReferences(InvalidSchema):
    """A schema brings in more than :data:`REFERENCED_SCHEMAS_MAX` schemas."""

    def __init__(self) -> None:
        super().__init__(
            f"Invalid schema: it references more than {REFERENCED_SCHEMAS_MAX} schemas, "
            "directly or not"
        )


Resolution = Generator[Reference, FetchedSchema | None, tuple[ResolvedReference, ...]]


def resolution(references: Sequence[Reference]) -> Resolution:
    """The resolution of ``references``: yields each reference whose schema it needs,
    is sent that schema (None: it does not exist), returns the resolved references.
    Raises :class:`ReferenceNotFound`, :class:`TooManyReferences`."""
    resolved: dict[str, ResolvedReference] = {}
    """By name, the first of each name kept, in the order ``parse`` wants them."""
    texts: dict[tuple[str, int], str] = {}
    """Every schema fetched, by (subject, version)."""
    todo: list[tuple[Reference, bool]] = [(reference, False) for reference in reversed(references)]
    """A stack of (reference, whether its dependencies are resolved already)."""
    while todo:
        reference, expanded = todo.pop()
        key = (reference.subject, reference.version)
        if not expanded and key not in texts:
            if len(texts) >= REFERENCED_SCHEMAS_MAX:
                raise TooManyReferences()
            fetched = yield reference
            if fetched is None:
                raise ReferenceNotFound(reference)
            texts[key] = fetched.text
            todo.append((reference, True))
            todo.extend((dependency, False) for dependency in reversed(fetched.references))
            continue
        if reference.name not in resolved:
            resolved[reference.name] = ResolvedReference(reference.name, texts[key])
    return tuple(resolved.values())


def resolve(
    references: Sequence[Reference], fetch: Callable[[Reference], FetchedSchema | None]
) -> tuple[ResolvedReference, ...]:
    """Resolve ``references``, fetching each schema with ``fetch`` (None: not found).
    Raises as :func:`resolution`, and whatever ``fetch`` raises."""
    steps = resolution(references)
    try:
        wanted = next(steps)
        while True:
            wanted = steps.send(fetch(wanted))
    except StopIteration as done:
        result: tuple[ResolvedReference, ...] = done.value
        return result


async def resolve_async(
    references: Sequence[Reference],
    fetch: Callable[[Reference], Awaitable[FetchedSchema | None]],
) -> tuple[ResolvedReference, ...]:
    """:func:`resolve` with a fetch that is awaited (the REST API's)."""
    steps = resolution(references)
    try:
        wanted = next(steps)
        while True:
            wanted = steps.send(await fetch(wanted))
    except StopIteration as done:
        result: tuple[ResolvedReference, ...] = done.value
        return result
