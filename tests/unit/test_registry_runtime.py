"""The registry shard on the real coordinator runtime, its parses run in worker threads
as the broker runs them: concurrent registrations take distinct ids and versions, a
failed append answers 50001 and changes nothing, and a new leader loading the log
answers the same."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from coordinator.coordinator_helpers import MemoryCoordinatorLog, run, until_done

from sluice.common import errors
from sluice.coordinator.api import Effect, RequestToken, Task
from sluice.coordinator.runtime import CoordinatorRuntime
from sluice.registry import checks
from sluice.registry.api import Answer, Call
from sluice.registry.shard import RegistryShard

REGISTRATIONS = 12


def proto(n: int) -> str:
    return f'syntax = "proto3";\npackage shop;\nmessage Order{n} {{ string id = 1; }}\n'


async def run_check(partition: int, task: Task) -> object:
    assert isinstance(task.work, checks.CheckWork)
    return await asyncio.to_thread(checks.run, task.work)


def calling(call: Call) -> Callable[[RegistryShard, int, RequestToken], list[Effect]]:
    return lambda shard, now_ms, token: shard.handle(now_ms, token, call)


async def ask(
    runtime: CoordinatorRuntime[RegistryShard], method: str, path: str, body: object = None
) -> Answer:
    call = Call(method, tuple(path.split("/")), {}, body)
    answer = await until_done(runtime.call(0, calling(call)))
    assert isinstance(answer, Answer)
    return answer


def test_concurrent_registrations_on_the_runtime_and_a_new_leader_answers_the_same() -> None:
    async def scenario() -> None:
        log = MemoryCoordinatorLog(partition_count=1, topic="_schemas")
        async with CoordinatorRuntime(log, RegistryShard, run_task=run_check) as runtime:
            await ask(runtime, "PUT", "config", {"compatibility": "NONE"})
            answers = await asyncio.gather(
                *(
                    ask(
                        runtime,
                        "POST",
                        f"subjects/s{n % 3}/versions",
                        {"schema": proto(n), "schemaType": "PROTOBUF"},
                    )
                    for n in range(REGISTRATIONS)
                )
            )
            assert all(answer.status == 200 for answer in answers), answers
            ids = sorted(answer.body["id"] for answer in answers)
            assert ids == list(range(1, REGISTRATIONS + 1))
            per_subject = [
                (await ask(runtime, "GET", f"subjects/s{k}/versions")).body for k in range(3)
            ]
            assert per_subject == [list(range(1, REGISTRATIONS // 3 + 1))] * 3
            log.fail_with = errors.NotEnoughReplicas("one replica left")
            failed = await ask(
                runtime,
                "POST",
                "subjects/s0/versions",
                {"schema": proto(99), "schemaType": "PROTOBUF"},
            )
            assert (failed.status, failed.body["error_code"]) == (500, 50001)
            log.fail_with = None
            before = [await ask(runtime, "GET", f"schemas/ids/{i}") for i in ids]
        async with CoordinatorRuntime(log, RegistryShard, run_task=run_check) as leader:
            after = [await ask(leader, "GET", f"schemas/ids/{i}") for i in ids]
            assert after == before
            again = await ask(
                leader,
                "POST",
                "subjects/s0/versions",
                {"schema": proto(99), "schemaType": "PROTOBUF"},
            )
            assert again.body["id"] == REGISTRATIONS + 1

    run(scenario)
