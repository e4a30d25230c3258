"""Fuzz the request decoder for every served (api, version), flexible ones included.

Bodies are random bytes, and valid encodings made with kio then mutated (bytes
overwritten, inserted, deleted, truncated, huge counts planted). Each must decode or
raise ProtocolError: any other exception fails the test, and so does a crash, because
the decoding runs in a child process (an abort in kio's native reader would otherwise
end the whole test run). The versions come from ``protocol.versions.SUPPORTED``, so the
test follows the table as it grows.

Reproduce a failure with the seed it prints: ``SLUICE_FUZZ_SEED=<seed>``;
``SLUICE_FUZZ_CASES`` sets the cases per version (default 60).
"""

from __future__ import annotations

import os
import random
import time

from decode_in_child import decode_in_child
from kio_examples import mutate, served_versions, valid_body

CASES_PER_VERSION = int(os.environ.get("SLUICE_FUZZ_CASES", "60"))
RANDOM_BODY_SHARE = 0.2
GENERATION_SECONDS_MAX = 120.0


def _cases(seed: int) -> list[tuple[int, int, bytes]]:
    rng = random.Random(seed)
    cases: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + GENERATION_SECONDS_MAX
    for api_key, version in served_versions():
        for _ in range(CASES_PER_VERSION):
            if rng.random() < RANDOM_BODY_SHARE:
                body = rng.randbytes(rng.randrange(0, 64))
            else:
                body = mutate(valid_body(api_key, version, rng), rng)
            cases.append((api_key, version, body))
        if time.monotonic() > deadline:
            break
    return cases


def test_random_and_mutated_bodies_decode_or_raise_protocol_error_for_every_served_version() -> (
    None
):
    seed = int(os.environ.get("SLUICE_FUZZ_SEED", random.randrange(2**32)))
    print(f"decoder fuzz seed {seed} (SLUICE_FUZZ_SEED={seed} reproduces it)")
    cases = _cases(seed)
    result = decode_in_child(cases)
    if result.died_on is not None:
        api_key, version, body = cases[result.died_on]
        raise AssertionError(
            f"seed {seed}: the decoder process died (exit {result.exit_code}) on API "
            f"{api_key} v{version} body {body.hex()}\n{result.stderr_tail}"
        )
    assert len(result.outcomes) == len(cases), f"seed {seed}: {result.stderr_tail}"
    failures = [
        (cases[index][0], cases[index][1], cases[index][2].hex(), outcome)
        for index, outcome in enumerate(result.outcomes)
        if not (outcome == "ok" or outcome.startswith("protocol_error"))
    ]
    assert not failures, f"seed {seed}: {len(failures)} failures, first ones: {failures[:5]}"
    decoded = sum(outcome == "ok" for outcome in result.outcomes)
    assert 0 < decoded < len(cases), "the fuzz reaches both outcomes"
