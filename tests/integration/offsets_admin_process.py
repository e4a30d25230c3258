"""One confluent-kafka ``AdminClient`` in its own process, for tests that keep an admin
client across a broker restart: a crash inside librdkafka ends this process, not the
test run.

    python offsets_admin_process.py BOOTSTRAP TIMEOUT_S [name=value ...]

Each line on stdin names a group; the answer is one JSON line on stdout::

    {"offsets": {"0": 100, "1": 100}, "seconds": 0.05}
    {"error": "KafkaException(...)", "seconds": 30.0}

librdkafka's own log (``debug`` given as a setting) goes to stderr.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient


def main() -> None:
    bootstrap, timeout_argument, *settings = sys.argv[1:]
    timeout_s = float(timeout_argument)
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000}
    config.update(setting.split("=", 1) for setting in settings)
    admin = AdminClient(config)
    for line in sys.stdin:
        group = line.strip()
        if not group:
            break
        started_s = time.monotonic()
        answer: dict[str, Any]
        try:
            (future,) = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s
            ).values()
            result = future.result(timeout=timeout_s + 5)
            answer = {"offsets": {str(tp.partition): tp.offset for tp in result.topic_partitions}}
        except Exception as e:
            answer = {"error": repr(e)}
        answer["seconds"] = round(time.monotonic() - started_s, 3)
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
