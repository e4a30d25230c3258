"""Decode request bodies in a child process, so that an abort in native code is a test
failure that names the input, not the end of the test run.

The child reads one JSON case per line on stdin (``[api_key, version, body_hex]``) and
writes, before decoding each, ``started <index>`` and after it ``<index> ok``,
``<index> protocol_error <message>`` or ``<index> <ExceptionType> <message>``. The parent sees
which case was running if the child dies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

from sluice.common.errors import ProtocolError
from sluice.protocol.codec import RequestHeader, decode_request_body

CHILD_TIMEOUT_S = 240.0
"""Below pytest-timeout's 300 s per test, so a hung child fails the test with a message."""


@dataclass(frozen=True)
class ChildResult:
    outcomes: list[str]
    """One line per finished case: ``ok``, ``protocol_error <message>`` or
    ``<Type> <message>``."""
    died_on: int | None
    """Index of the case the child was decoding when it died (None if it finished)."""
    exit_code: int
    stderr_tail: str


def decode_in_child(cases: list[tuple[int, int, bytes]]) -> ChildResult:
    """Decode each (api_key, version, body) with the broker's codec in a child process."""
    # The child imports sluice exactly as this process did: same interpreter, same
    # environment (so the same PYTHONPATH).
    env = dict(os.environ)
    stdin = "".join(json.dumps([a, v, b.hex()]) + "\n" for a, v, b in cases)
    completed = subprocess.run(
        [sys.executable, __file__],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    outcomes: list[str] = []
    started: int | None = None
    for line in completed.stdout.splitlines():
        if line.startswith("started "):
            started = int(line.split()[1])
        else:
            outcomes.append(line.split(" ", 1)[1])
            started = None
    return ChildResult(outcomes, started, completed.returncode, completed.stderr[-2000:])


def _child() -> None:
    for index, line in enumerate(sys.stdin):
        api_key, version, body_hex = json.loads(line)
        print(f"started {index}", flush=True)
        try:
            decode_request_body(
                RequestHeader(api_key, version, 1, "child"), bytes.fromhex(body_hex), 0
            )
        except ProtocolError as e:
            print(f"{index} protocol_error {e}".replace("\n", " "), flush=True)
        except Exception as e:  # reported to the parent as a failure
            print(f"{index} {type(e).__name__} {e}".replace("\n", " "), flush=True)
        else:
            print(f"{index} ok", flush=True)


if __name__ == "__main__":
    _child()
