"""The registry shard, call by call, with Avro schemas: Confluent's answers and error
codes, its records and what replaying them rebuilds."""

from __future__ import annotations

import json

import pytest
from registry_testing import Driver, record_schema

from sluice.common.errors import ErrorCode
from sluice.coordinator.api import Append, Reload, Reply, Task
from sluice.registry import checks
from sluice.registry.api import Answer, Call
from sluice.registry.config import RegistryConfig
from sluice.registry.records import ModeKey, ModeValue, decode_key, decode_value

V1 = record_schema("Order", ("id", "int"))
V2 = record_schema("Order", ("id", "int"), ("note", "string", ""))
BREAKS_BACKWARD = record_schema("Order", ("id", "int"), ("total", "int"))


@pytest.fixture
def driver() -> Driver:
    return Driver()


def register(driver: Driver, subject: str, text: str, **query: str) -> Answer:
    return driver.call("POST", f"subjects/{subject}/versions", {"schema": text}, **query)


def error(answer: Answer) -> tuple[int, int]:
    assert isinstance(answer.body, dict), answer
    return answer.status, answer.body["error_code"]


# ====================================================================== register


def test_register_answers_the_id_and_reading_it_back_gives_the_canonical_text(
    driver: Driver,
) -> None:
    answer = register(driver, "orders-value", V1)
    assert answer.status == 200
    assert answer.body["id"] == 1
    assert answer.body["version"] == 1
    canonical = json.dumps(json.loads(V1), separators=(",", ":"))
    assert driver.call("GET", "schemas/ids/1") == Answer(200, {"schema": canonical})
    assert driver.call("GET", "schemas/ids/1/schema") == Answer(200, canonical)
    assert driver.call("GET", "subjects/orders-value/versions/1") == Answer(
        200, {"subject": "orders-value", "version": 1, "id": 1, "schema": canonical}
    )
    assert driver.call("GET", "subjects/orders-value/versions/latest").body["version"] == 1
    assert driver.call("GET", "subjects/orders-value/versions/-1").body["version"] == 1
    assert driver.call("GET", "subjects") == Answer(200, ["orders-value"])
    assert driver.call("GET", "subjects/orders-value/versions") == Answer(200, [1])


def test_the_same_schema_again_is_the_same_id_and_no_new_version(driver: Driver) -> None:
    assert register(driver, "s", V1).body["id"] == 1
    records = len(driver.log)
    assert register(driver, "s", V1).body["id"] == 1
    assert len(driver.log) == records
    assert driver.call("GET", "subjects/s/versions") == Answer(200, [1])


def test_the_same_schema_under_another_subject_keeps_its_id(driver: Driver) -> None:
    assert register(driver, "a", V1).body["id"] == 1
    assert register(driver, "b", V2).body["id"] == 2
    answer = register(driver, "c", V1)
    assert (answer.body["id"], answer.body["version"]) == (1, 1)
    assert driver.call("GET", "schemas/ids/1/subjects") == Answer(200, ["a", "c"])
    assert driver.call("GET", "schemas/ids/1/versions") == Answer(
        200, [{"subject": "a", "version": 1}, {"subject": "c", "version": 1}]
    )


def test_a_compatible_evolution_is_a_new_version_and_an_incompatible_one_is_409(
    driver: Driver,
) -> None:
    register(driver, "s", V1)
    assert register(driver, "s", V2).body == {
        "id": 2,
        **driver.call("GET", "subjects/s/versions/2").body,
    }
    refused = register(driver, "s", BREAKS_BACKWARD)
    assert error(refused) == (409, 40901)
    assert "'total'" in refused.body["message"]
    assert driver.call("GET", "subjects/s/versions") == Answer(200, [1, 2])


def test_normalize_registers_and_finds_the_normal_form(driver: Driver) -> None:
    def with_aliases(*aliases: str) -> str:
        field = {"name": "a", "type": "int", "aliases": list(aliases)}
        return json.dumps({"type": "record", "name": "R", "fields": [field]})

    zb, bz = with_aliases("z", "b"), with_aliases("b", "z")
    first = register(driver, "s", zb, normalize="true")
    assert register(driver, "s", bz, normalize="True").body["id"] == first.body["id"]
    found = driver.call("POST", "subjects/s", {"schema": zb}, normalize="true")
    assert found.status == 200
    assert found.body["id"] == first.body["id"]
    assert error(driver.call("POST", "subjects/s", {"schema": zb})) == (404, 40403)
    assert register(driver, "t", zb).body["id"] != first.body["id"], "not normalized: another"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"schema": "not json"}, 42201),
        ({"schema": ""}, 42201),
        ({}, 42201),
        ({"schema": 5}, 400),
        ({"schema": V1, "schemaType": "XML"}, 42201),
        ({"schema": V1, "references": "x"}, 400),
        ({"schema": V1, "references": [{"name": "x", "subject": "missing", "version": 1}]}, 42201),
        ([1, 2], 400),
        (None, 42201),
    ],
)
def test_bad_register_bodies_are_refused_and_change_nothing(
    driver: Driver, body: object, code: int
) -> None:
    """42201 for a schema that is not one; 400 (code and status, as Confluent's REST
    layer answers a body Jackson cannot map) for a body of the wrong shape."""
    assert error(driver.call("POST", "subjects/s/versions", body)) == (int(str(code)[:3]), code)
    assert driver.log == []
    assert driver.call("GET", "subjects") == Answer(200, [])


def test_a_schema_over_the_size_bound_is_refused() -> None:
    driver = Driver.with_config(RegistryConfig(schema_max_bytes=20))
    assert error(register(driver, "s", V1)) == (422, 42209)


def test_references_resolve_and_a_referenced_schema_cannot_be_deleted(driver: Driver) -> None:
    register(driver, "customer", record_schema("Customer", ("id", "int")))
    body = {
        "schema": record_schema("Order", ("buyer", "Customer")),
        "references": [{"name": "Customer", "subject": "customer", "version": 1}],
    }
    answer = driver.call("POST", "subjects/order/versions", body)
    assert answer.status == 200, answer
    got = driver.call("GET", f"schemas/ids/{answer.body['id']}")
    assert got.body["references"] == body["references"]
    assert driver.call("GET", "subjects/customer/versions/1/referencedby") == Answer(
        200, [answer.body["id"]]
    )
    assert error(driver.call("DELETE", "subjects/customer/versions/1")) == (422, 42206)
    assert error(driver.call("DELETE", "subjects/customer")) == (422, 42206)
    # Without the reference the type is unknown: invalid.
    assert error(driver.call("POST", "subjects/x/versions", {"schema": body["schema"]})) == (
        422,
        42201,
    )


# ====================================================================== deletes


def test_soft_then_hard_delete_of_a_version(driver: Driver) -> None:
    register(driver, "s", V1)
    register(driver, "s", V2)
    assert error(driver.call("DELETE", "subjects/s/versions/1", permanent="true")) == (404, 40407)
    assert driver.call("DELETE", "subjects/s/versions/1") == Answer(200, 1)
    assert error(driver.call("DELETE", "subjects/s/versions/1")) == (404, 40406)
    assert driver.call("GET", "subjects/s/versions") == Answer(200, [2])
    assert driver.call("GET", "subjects/s/versions", deleted="true") == Answer(200, [1, 2])
    assert error(driver.call("GET", "subjects/s/versions/1")) == (404, 40402)
    assert driver.call("GET", "subjects/s/versions/1", deleted="true").status == 200
    assert driver.call("GET", "schemas/ids/1").status == 200, "an id outlives a soft delete"
    assert driver.call("DELETE", "subjects/s/versions/1", permanent="true") == Answer(200, 1)
    assert error(driver.call("GET", "schemas/ids/1")) == (404, 40403)
    assert error(driver.call("DELETE", "subjects/s/versions/9")) == (404, 40402)
    assert error(driver.call("DELETE", "subjects/nope/versions/1")) == (404, 40401)


def test_soft_then_hard_delete_of_a_subject(driver: Driver) -> None:
    register(driver, "s", V1)
    register(driver, "s", V2)
    driver.call("PUT", "config/s", {"compatibility": "NONE"})
    assert error(driver.call("DELETE", "subjects/s", permanent="true")) == (404, 40405)
    assert driver.call("DELETE", "subjects/s") == Answer(200, [1, 2])
    assert error(driver.call("DELETE", "subjects/s")) == (404, 40404)
    assert driver.call("GET", "subjects") == Answer(200, [])
    assert driver.call("GET", "subjects", deleted="true") == Answer(200, ["s"])
    assert error(driver.call("GET", "subjects/s/versions")) == (404, 40401)
    assert driver.call("DELETE", "subjects/s", permanent="true") == Answer(200, [1, 2])
    assert driver.call("GET", "subjects", deleted="true") == Answer(200, [])
    assert error(driver.call("GET", "config/s")) == (404, 40408), "its config went with it"
    assert error(driver.call("DELETE", "subjects/s")) == (404, 40401)


def test_versions_are_not_reused_after_a_soft_delete_and_the_id_is(driver: Driver) -> None:
    register(driver, "s", V1)
    driver.call("DELETE", "subjects/s/versions/1")
    again = register(driver, "s", V1)
    assert (again.body["id"], again.body["version"]) == (1, 2)
    # Confluent drops the soft-deleted version holding the same id.
    assert driver.call("GET", "subjects/s/versions", deleted="true") == Answer(200, [2])


# ====================================================================== lookups


def test_lookup(driver: Driver) -> None:
    register(driver, "s", V1)
    found = driver.call("POST", "subjects/s", {"schema": V1})
    assert (found.status, found.body["id"], found.body["version"]) == (200, 1, 1)
    assert error(driver.call("POST", "subjects/s", {"schema": V2})) == (404, 40403)
    assert error(driver.call("POST", "subjects/other", {"schema": V1})) == (404, 40401)
    driver.call("DELETE", "subjects/s/versions/1")
    assert error(driver.call("POST", "subjects/s", {"schema": V1})) == (404, 40401)
    assert driver.call("POST", "subjects/s", {"schema": V1}, deleted="true").status == 200


def test_reads_of_what_is_not_there(driver: Driver) -> None:
    assert error(driver.call("GET", "schemas/ids/7")) == (404, 40403)
    assert error(driver.call("GET", "subjects/s/versions/1")) == (404, 40401)
    register(driver, "s", V1)
    assert error(driver.call("GET", "subjects/s/versions/2")) == (404, 40402)
    assert error(driver.call("GET", "subjects/s/versions/0")) == (422, 42202)
    assert error(driver.call("GET", "subjects/s/versions/first")) == (422, 42202)
    assert error(driver.call("GET", "subjects/s/versions/2147483648")) == (422, 42202)
    assert error(driver.call("GET", "nothing/here")) == (404, 404)
    assert error(driver.call("PATCH", "subjects")) == (405, 405)
    assert error(driver.call("GET", "schemas/ids/abc")) == (404, 404)


def test_listings_and_constants(driver: Driver) -> None:
    register(driver, "a-value", V1)
    register(driver, "a-value", V2)
    register(driver, "b-key", V1)
    assert driver.call("GET", "") == Answer(200, {})
    assert driver.call("GET", "schemas/types") == Answer(200, ["JSON", "PROTOBUF", "AVRO"])
    assert driver.call("GET", "contexts") == Answer(200, ["."])
    assert driver.call("GET", "subjects", subjectPrefix="a") == Answer(200, ["a-value"])
    assert driver.call("GET", "subjects", subjectPrefix=":*:") == Answer(200, ["a-value", "b-key"])
    every = driver.call("GET", "schemas").body
    assert [(s["subject"], s["version"]) for s in every] == [
        ("a-value", 1),
        ("a-value", 2),
        ("b-key", 1),
    ]
    latest = driver.call("GET", "schemas", latestOnly="true").body
    assert [(s["subject"], s["version"]) for s in latest] == [("a-value", 2), ("b-key", 1)]
    page = driver.call("GET", "schemas", offset="1", limit="1").body
    assert [(s["subject"], s["version"]) for s in page] == [("a-value", 2)]


def test_listings_page_by_offset_and_limit_as_confluent_s_do(driver: Driver) -> None:
    """Confluent's client sends ``offset`` and ``limit`` with every listing (0 and -1 by
    default); a limit of 0 or less means no limit, as in Confluent's registry."""
    for subject in ("a-value", "b-value", "c-value", "d-value"):
        register(driver, subject, V1)
    register(driver, "a-value", V2)
    register(driver, "a-value", record_schema("Order", ("id", "int"), ("n", "int", 0)))
    assert driver.call("GET", "subjects", offset="1", limit="2") == Answer(
        200, ["b-value", "c-value"]
    )
    assert driver.call("GET", "subjects", offset="0", limit="-1").body == [
        "a-value",
        "b-value",
        "c-value",
        "d-value",
    ]
    assert driver.call("GET", "subjects", limit="0").body == driver.call("GET", "subjects").body
    assert driver.call("GET", "subjects/a-value/versions", offset="1", limit="1") == Answer(
        200, [2]
    )
    assert driver.call("GET", "subjects/a-value/versions", offset="5") == Answer(200, [])
    assert driver.call("GET", "schemas/ids/1/subjects", offset="1", limit="2") == Answer(
        200, ["b-value", "c-value"]
    )
    assert driver.call("GET", "schemas/ids/1/versions", offset="3", limit="5") == Answer(
        200, [{"subject": "d-value", "version": 1}]
    )
    assert len(driver.call("GET", "schemas", limit="0").body) == 6
    assert error(driver.call("GET", "subjects", limit="many")) == (404, 404), "as Jersey"


def test_deleted_only_lists_what_is_soft_deleted(driver: Driver) -> None:
    register(driver, "a-value", V1)
    register(driver, "a-value", V2)
    register(driver, "b-value", V1)
    driver.call("DELETE", "subjects/a-value/versions/1")
    driver.call("DELETE", "subjects/b-value")
    assert driver.call("GET", "subjects/a-value/versions", deletedOnly="true") == Answer(200, [1])
    assert driver.call("GET", "subjects", deletedOnly="true") == Answer(200, ["a-value", "b-value"])
    # deletedOnly wins over deleted, as in Confluent's registry.
    assert driver.call(
        "GET", "subjects/b-value/versions", deleted="true", deletedOnly="true"
    ) == Answer(200, [1])
    register(driver, "c-value", V1)
    assert error(driver.call("GET", "subjects/c-value/versions", deletedOnly="true")) == (
        404,
        40401,
    )


# ====================================================================== compatibility


def test_the_compatibility_endpoint(driver: Driver) -> None:
    target = "compatibility/subjects/s/versions"
    assert driver.call("POST", target, {"schema": V1}) == Answer(200, {"is_compatible": True})
    register(driver, "s", V1)
    assert driver.call("POST", target, {"schema": V2}) == Answer(200, {"is_compatible": True})
    assert driver.call("POST", f"{target}/latest", {"schema": BREAKS_BACKWARD}) == Answer(
        200, {"is_compatible": False}
    )
    verbose = driver.call("POST", target, {"schema": BREAKS_BACKWARD}, verbose="true")
    assert verbose.body["is_compatible"] is False
    assert any("'total'" in message for message in verbose.body["messages"])
    assert driver.call("POST", target, {"schema": V2}, verbose="true").body == {
        "is_compatible": True,
        "messages": [],
    }
    assert error(driver.call("POST", f"{target}/5", {"schema": V2})) == (404, 40402)
    assert error(driver.call("POST", target, {"schema": "{"})) == (422, 42201)
    assert driver.log == [driver.log[0]], "a check writes nothing"


@pytest.mark.parametrize(
    ("level", "compatible"),
    [
        ("NONE", [True, True, True, True, True]),
        ("BACKWARD", [True, False, True, True, True]),
        ("BACKWARD_TRANSITIVE", [True, False, False, True, True]),
        ("FORWARD", [False, True, True, True, True]),
        ("FORWARD_TRANSITIVE", [False, False, False, False, True]),
        ("FULL", [False, False, True, True, True]),
        ("FULL_TRANSITIVE", [False, False, False, False, True]),
    ],
)
def test_compatibility_levels(driver: Driver, level: str, compatible: list[bool]) -> None:
    """v1 = {a, x}, v2 = {a, b=0}; an Avro reader reads a writer when each of its fields
    is written or has a default. Each candidate passes a different set of levels."""
    driver.call("PUT", "config", {"compatibility": "NONE"})
    register(driver, "s", record_schema("R", ("a", "int"), ("x", "int")))
    register(driver, "s", record_schema("R", ("a", "int"), ("b", "int", 0)))
    assert driver.call("PUT", "config", {"compatibility": level}).status == 200
    candidates = [
        record_schema("R"),  # reads anything; nothing reads it
        record_schema("R", ("a", "int"), ("c", "int")),  # v2 reads it, it reads neither
        record_schema("R", ("a", "int"), ("b", "int")),  # it and v2 read each other
        record_schema("R", ("a", "int"), ("b", "int", 1)),  # reads both, v1 cannot read it
        record_schema("R", ("a", "int"), ("x", "int", 0), ("b", "int", 1)),  # all ways
    ]
    found = [
        driver.call("POST", "compatibility/subjects/s/versions", {"schema": c}).body[
            "is_compatible"
        ]
        for c in candidates
    ]
    assert found == compatible
    registered = [register(driver, f"copy-{n}", c).status for n, c in enumerate(candidates)]
    assert registered == [200] * len(candidates), "other subjects have no versions yet"


# ====================================================================== config, mode


def test_config(driver: Driver) -> None:
    assert driver.call("GET", "config") == Answer(200, {"compatibilityLevel": "BACKWARD"})
    assert driver.call("PUT", "config", {"compatibility": "full"}) == Answer(
        200, {"compatibility": "FULL"}
    )
    assert driver.call("GET", "config") == Answer(200, {"compatibilityLevel": "FULL"})
    assert error(driver.call("GET", "config/s")) == (404, 40408)
    assert driver.call("GET", "config/s", defaultToGlobal="true") == Answer(
        200, {"compatibilityLevel": "FULL"}
    )
    driver.call("PUT", "config/s", {"compatibility": "NONE"})
    assert driver.call("GET", "config/s") == Answer(200, {"compatibilityLevel": "NONE"})
    assert driver.call("DELETE", "config/s") == Answer(200, {"compatibilityLevel": "NONE"})
    assert error(driver.call("DELETE", "config/s")) == (404, 40401)
    assert driver.call("DELETE", "config") == Answer(200, {"compatibilityLevel": "FULL"})
    assert driver.call("GET", "config") == Answer(200, {"compatibilityLevel": "BACKWARD"})
    assert error(driver.call("PUT", "config", {"compatibility": "SOMETIMES"})) == (422, 42203)
    assert error(driver.call("PUT", "config", {"level": "FULL"})) == (422, 42203)


def test_the_global_default_level_comes_from_the_config() -> None:
    driver = Driver.with_config(RegistryConfig(compatibility_level="NONE"))
    assert driver.call("GET", "config") == Answer(200, {"compatibilityLevel": "NONE"})
    register(driver, "s", V1)
    assert register(driver, "s", BREAKS_BACKWARD).status == 200


def test_modes(driver: Driver) -> None:
    assert driver.call("GET", "mode") == Answer(200, {"mode": "READWRITE"})
    register(driver, "s", V1)
    assert driver.call("PUT", "mode/s", {"mode": "READONLY"}) == Answer(200, {"mode": "READONLY"})
    assert error(register(driver, "s", V2)) == (422, 42205)
    assert error(driver.call("DELETE", "subjects/s/versions/1")) == (422, 42205)
    assert error(driver.call("DELETE", "subjects/s")) == (422, 42205)
    assert register(driver, "t", V2).status == 200, "other subjects are not read-only"
    assert driver.call("GET", "mode/s") == Answer(200, {"mode": "READONLY"})
    assert error(driver.call("GET", "mode/t")) == (404, 40409)
    assert driver.call("GET", "mode/t", defaultToGlobal="true") == Answer(
        200, {"mode": "READWRITE"}
    )
    assert driver.call("DELETE", "mode/s") == Answer(200, {"mode": "READONLY"})
    assert register(driver, "s", V2).status == 200
    assert error(driver.call("PUT", "mode", {"mode": "SLEEPY"})) == (422, 42204)
    assert error(driver.call("PUT", "mode", {"mode": "FORWARD"})) == (422, 42204)


def test_import_mode_takes_ids_and_versions_and_read_write_refuses_them(driver: Driver) -> None:
    body = {"schema": V1, "id": 42, "version": 3}
    assert error(driver.call("POST", "subjects/s/versions", body)) == (422, 42205)
    register(driver, "t", V2)
    assert error(driver.call("PUT", "mode", {"mode": "IMPORT"})) == (422, 42205)
    assert driver.call("PUT", "mode/s", {"mode": "IMPORT"}).status == 200
    imported = driver.call("POST", "subjects/s/versions", body)
    assert (imported.status, imported.body["id"], imported.body["version"]) == (200, 42, 3)
    assert error(register(driver, "s", V2)) == (422, 42205), "IMPORT needs an id"
    clash = {"schema": V2, "id": 42, "version": 4}
    assert error(driver.call("POST", "subjects/s/versions", clash)) == (422, 42205)
    driver.call("PUT", "mode/s", {"mode": "READWRITE"})
    assert register(driver, "u", BREAKS_BACKWARD).body["id"] == 43, "ids go on after the max"


# ====================================================================== failures


def test_a_failed_append_answers_50001_and_changes_nothing(driver: Driver) -> None:
    register(driver, "s", V1)
    driver.fail_appends_with = ErrorCode.not_enough_replicas
    assert error(register(driver, "s", V2)) == (500, 50001)
    assert error(driver.call("DELETE", "subjects/s")) == (500, 50001)
    assert error(driver.call("PUT", "config", {"compatibility": "NONE"})) == (500, 50001)
    assert driver.call("GET", "subjects/s/versions") == Answer(200, [1])
    assert driver.call("GET", "config") == Answer(200, {"compatibilityLevel": "BACKWARD"})
    driver.fail_appends_with = ErrorCode.not_leader_or_follower
    assert error(register(driver, "s", V2)) == (500, 50003)
    driver.fail_appends_with = None
    again = register(driver, "s", V2)
    assert (again.body["id"], again.body["version"]) == (2, 2)
    assert driver.reloads == 4, "each failed append asked for the log to be read back"


def test_after_a_failed_append_the_shard_refuses_writes_until_it_is_reloaded(
    driver: Driver,
) -> None:
    register(driver, "s", V1)
    driver.hold = True
    failing = driver.send("POST", "subjects/s/versions", {"schema": V2})
    queued = driver.send("PUT", "config", {"compatibility": "NONE"})
    (task,) = driver.held
    driver.held.clear()
    assert isinstance(task, Task)
    (append,) = driver.shard.task_completed(0, task.task_id, checks.run(task.work))
    assert isinstance(append, Append)
    stale = driver.shard
    effects = stale.append_completed(0, append.append_id, ErrorCode.request_timed_out)
    assert isinstance(effects[-1], Reload), effects
    driver.hold = False
    driver.run(effects[:-1])
    assert error(driver.answers.pop(failing)) == (500, 50001)
    assert error(driver.answers.pop(queued)) == (500, 50001), "queued writes are refused"
    refused = stale.handle(0, 99, Call("DELETE", ("subjects", "s"), {}, None))
    assert [type(effect) for effect in refused] == [Reply]
    assert error(refused[0].response) == (500, 50001)
    read = stale.handle(0, 100, Call("GET", ("subjects", "s", "versions"), {}, None))
    assert read == [Reply(100, Answer(200, [1]))], "reads go on meanwhile"


def test_a_failed_append_that_reached_the_log_never_lets_two_schemas_share_an_id(
    driver: Driver,
) -> None:
    register(driver, "a", V1)
    driver.fail_appends_with = ErrorCode.request_timed_out
    driver.failed_appends_reach_the_log = True
    assert error(register(driver, "a", V2)) == (500, 50001)
    driver.fail_appends_with = None
    other = register(driver, "b", BREAKS_BACKWARD)
    assert other.body["id"] == 3, "id 2 is the failed write's, which the log holds"
    assert driver.call("GET", "subjects/a/versions") == Answer(200, [1, 2])
    replayed = driver.replayed()
    replayed.state.check_invariants()
    assert {i: len(h) for i, h in replayed.state.versions_by_id.items()} == {1: 1, 2: 1, 3: 1}


def test_concurrent_registrations_run_one_at_a_time_and_never_share_an_id(
    driver: Driver,
) -> None:
    driver.call("PUT", "config", {"compatibility": "NONE"})
    driver.hold = True
    schemas = [record_schema(f"R{n}", ("a", "int")) for n in range(5)]
    tokens = [
        driver.send("POST", f"subjects/s{n % 2}/versions", {"schema": s})
        for n, s in enumerate(schemas)
    ]
    assert len(driver.held) == 1 and isinstance(driver.held[0], Task), "one write at a time"
    token_of_read = driver.send("GET", "subjects")
    assert driver.answers.pop(token_of_read) == Answer(200, []), "reads do not wait"
    kinds = [type(effect) for effect in driver.release()]
    assert kinds == [Task, Append] * 5
    ids = [driver.answers[token].body["id"] for token in tokens]
    assert ids == [1, 2, 3, 4, 5]
    assert driver.call("GET", "subjects/s0/versions") == Answer(200, [1, 2, 3])


def test_a_change_while_a_parse_runs_makes_it_run_again(driver: Driver) -> None:
    register(driver, "s", V1)
    driver.hold = True
    token = driver.send("POST", "subjects/s/versions", {"schema": V2})
    (task,) = driver.held
    # A record arriving meanwhile (the shard cannot get one while it writes alone; the
    # check guards the registration all the same).
    driver.shard.state.revision += 1
    driver.held.clear()
    driver.hold = False
    assert isinstance(task, Task)
    effects = driver.shard.task_completed(0, task.task_id, checks.run(task.work))
    assert [type(effect) for effect in effects] == [Task]
    driver.run(effects)
    assert driver.answers[token].body["version"] == 2


def test_a_registration_refused_when_run_again_lets_the_next_write_go(driver: Driver) -> None:
    register(driver, "s", V1)
    driver.hold = True
    registering = driver.send("POST", "subjects/s/versions", {"schema": V2})
    configuring = driver.send("PUT", "config", {"compatibility": "NONE"})
    (task,) = driver.held
    driver.held.clear()
    driver.hold = False
    # The subject turned read-only while the parse ran.
    driver.shard.state.apply(ModeKey("s"), ModeValue("s", "READONLY"))
    assert isinstance(task, Task)
    driver.run(driver.shard.task_completed(0, task.task_id, checks.run(task.work)))
    assert error(driver.answers[registering]) == (422, 42205)
    assert driver.answers[configuring] == Answer(200, {"compatibility": "NONE"})


# ====================================================================== replay


def test_replaying_the_log_rebuilds_the_same_state_and_ids_stay(driver: Driver) -> None:
    register(driver, "a", V1)
    register(driver, "a", V2)
    register(driver, "b", V1)
    driver.call("DELETE", "subjects/a/versions/1")
    driver.call("PUT", "config/b", {"compatibility": "FULL"})
    driver.call("PUT", "mode/b", {"mode": "READONLY"})
    replayed = driver.replayed()
    assert vars(replayed.state) == vars(driver.shard.state)
    replayed.state.check_invariants()
    fresh = Driver(replayed, list(driver.log))
    assert register(fresh, "c", V2).body["id"] == 2
    assert register(fresh, "c", BREAKS_BACKWARD).status == 409
    fresh.call("PUT", "config/c", {"compatibility": "NONE"})
    assert register(fresh, "c", BREAKS_BACKWARD).body["id"] == 3


def test_written_records_are_confluents_layouts(driver: Driver) -> None:
    register(driver, "s", V1)
    driver.call("DELETE", "subjects/s")
    driver.call("PUT", "config", {"compatibility": "FULL"})
    keys = [json.loads(key) for key, _ in driver.log]
    assert keys == [
        {"keytype": "SCHEMA", "subject": "s", "version": 1, "magic": 1},
        {"keytype": "DELETE_SUBJECT", "subject": "s", "magic": 0},
        {"keytype": "CONFIG", "magic": 0},
    ]
    for key, value in driver.log:
        decode_value(decode_key(key), value)
