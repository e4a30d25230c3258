"""Routes: which subject a call is about and whether it writes (the broker authorizes
with them), and the parsing of versions and bodies."""

from __future__ import annotations

import pytest

from sluice.registry.api import Answer, Call
from sluice.registry.errors import RegistryError, answer_for
from sluice.registry.operations import LATEST, Register, SchemaRequest, SetConfig
from sluice.registry.routes import is_write, parse_version, route, subject_of
from sluice.schemas.api import Reference, SchemaType


@pytest.mark.parametrize(
    ("method", "segments", "subject", "write"),
    [
        ("GET", (), None, False),
        ("GET", ("subjects",), None, False),
        ("POST", ("subjects", "orders-value", "versions"), "orders-value", True),
        ("POST", ("subjects", "orders-value"), "orders-value", False),
        ("DELETE", ("subjects", "orders-value"), "orders-value", True),
        ("GET", ("subjects", "a/b", "versions", "1"), "a/b", False),
        ("DELETE", ("subjects", "a", "versions", "1"), "a", True),
        ("POST", ("compatibility", "subjects", "x-key", "versions"), "x-key", False),
        ("PUT", ("config",), None, True),
        ("GET", ("config",), None, False),
        ("PUT", ("config", "s"), "s", True),
        ("DELETE", ("mode", "s"), "s", True),
        ("GET", ("schemas", "ids", "3"), None, False),
    ],
)
def test_subject_and_write(
    method: str, segments: tuple[str, ...], subject: str | None, write: bool
) -> None:
    call = Call(method, segments)
    assert subject_of(call) == subject
    assert is_write(call) is write


def test_a_write_with_a_bad_body_is_still_a_write() -> None:
    assert is_write(Call("POST", ("subjects", "s", "versions"), body="nonsense"))


@pytest.mark.parametrize(
    ("raw", "version"), [("latest", LATEST), ("LATEST", LATEST), ("-1", LATEST), ("7", 7)]
)
def test_versions(raw: str, version: int) -> None:
    assert parse_version(raw) == version


@pytest.mark.parametrize("raw", ["0", "-2", "x", "1.5", "", "2147483648"])
def test_bad_versions_are_42202(raw: str) -> None:
    with pytest.raises(RegistryError) as caught:
        parse_version(raw)
    assert caught.value.code == 42202


def test_a_register_body_with_everything() -> None:
    body = {
        "schema": "{}",
        "schemaType": "PROTOBUF",
        "references": [{"name": "a.proto", "subject": "a", "version": 2}],
        "id": 5,
        "version": 3,
        "metadata": {"ignored": True},
    }
    assert route(Call("POST", ("subjects", "s", "versions"), {"normalize": "TRUE"}, body)) == (
        Register(
            "s",
            SchemaRequest(SchemaType.PROTOBUF, "{}", (Reference("a.proto", "a", 2),), 5, 3),
            normalize=True,
        )
    )


def test_confluents_no_id_and_no_version_mean_none() -> None:
    body = {"schema": "{}", "id": -1, "version": 0}
    operation = route(Call("POST", ("subjects", "s", "versions"), {}, body))
    assert isinstance(operation, Register)
    assert (operation.schema.id, operation.schema.version) == (None, None)


def test_a_config_update_names_its_level_either_way() -> None:
    for name in ("compatibility", "compatibilityLevel"):
        operation = route(Call("PUT", ("config", "s"), {}, {name: "full_transitive"}))
        assert operation == SetConfig("s", "FULL_TRANSITIVE")


@pytest.mark.parametrize(
    "segments",
    [
        ("subjects", "", "versions"),
        ("subjects", "a\nb", "versions"),
        ("subjects", "__GLOBAL", "versions"),
        ("subjects", "bad\ud800", "versions"),
        ("config", "a\x00"),
        ("config", ""),
        ("mode", ""),
    ],
)
def test_writes_to_invalid_subjects_are_42208(segments: tuple[str, ...]) -> None:
    body = {"schema": "{}", "compatibility": "NONE", "mode": "READONLY"}
    with pytest.raises(RegistryError) as caught:
        route(Call("POST" if segments[0] == "subjects" else "PUT", segments, {}, body))
    assert caught.value.code == 42208


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"schema": "bad \udc80"}, 42201),
        ({"schema": "{}", "references": [{"name": "\ud800", "subject": "s", "version": 1}]}, 42201),
        ({"schema": "{}", "id": 2**31}, 400),
        ({"schema": "{}", "version": True}, 400),
    ],
)
def test_bodies_that_cannot_be_stored_are_refused(body: object, code: int) -> None:
    """Text that is not Unicode is an invalid schema (42201); an id or version that is
    not a Java int is a body of the wrong shape (400, as Jackson's mapping refuses it)."""
    with pytest.raises(RegistryError) as caught:
        route(Call("POST", ("subjects", "s", "versions"), {}, body))
    assert caught.value.code == code


@pytest.mark.parametrize("query", [{"offset": "two"}, {"limit": "1.5"}])
def test_a_listing_bound_that_is_not_an_integer_is_404_as_jersey_answers(
    query: dict[str, str],
) -> None:
    with pytest.raises(RegistryError) as caught:
        route(Call("GET", ("subjects",), query, None))
    assert caught.value.code == 404
    assert answer_for(caught.value) == Answer(
        404, {"error_code": 404, "message": "HTTP 404 Not Found"}
    )
