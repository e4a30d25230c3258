"""A share consumer that takes records and never acknowledges them, as a separate OS
process, so that a test can SIGKILL it while it holds their locks.

Run as a script, it joins share group ``--group`` on ``--topic`` with confluent-kafka's
ShareConsumer in explicit acknowledgement mode, polls until it holds ``--records``
records (or ``--timeout-s`` passed), prints one JSON line::

    {"offsets": [0, 1, 2], "delivery_counts": [1, 1, 1]}

and then blocks on stdin without acknowledging or closing anything: it holds the
records until it is killed (or its input ends, when it exits without closing the
consumer either).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from confluent_kafka import ShareConsumer

POLL_TIMEOUT_S = 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--timeout-s", type=float, default=30.0)
    arguments = parser.parse_args()
    consumer = ShareConsumer(
        {
            "bootstrap.servers": arguments.bootstrap,
            "group.id": arguments.group,
            "share.acknowledgement.mode": "explicit",
            "max.poll.records": arguments.records,
        }
    )
    consumer.subscribe([arguments.topic])
    offsets: list[int] = []
    counts: list[int] = []
    deadline = time.monotonic() + arguments.timeout_s
    while len(offsets) < arguments.records and time.monotonic() < deadline:
        for message in consumer.poll(POLL_TIMEOUT_S):
            if message.error() is None:
                offsets.append(message.offset())
                counts.append(message.delivery_count())
        if offsets:
            # Explicit mode: a poll with records unacknowledged is refused; one poll of
            # ``--records`` at most is all this member takes.
            break
    sys.stdout.write(json.dumps({"offsets": offsets, "delivery_counts": counts}) + "\n")
    sys.stdout.flush()
    sys.stdin.read()  # hold the records, unacknowledged, until killed
    os._exit(0)  # no close(): leaving would release what this member holds


if __name__ == "__main__":
    main()
