"""Where a ``sluice serve`` process listens, read back from its log.

A broker logs one line once it accepts clients, naming each listener with the address
it bound (a listener given port 0 gets a port of the kernel's choice)::

    sluice broker 0 ready on PLAINTEXT 127.0.0.1:41233 (PLAINTEXT), SASL 127.0.0.1:38911
        (SASL_PLAINTEXT) (data in /tmp/d, 3 partition(s); single node;
        Schema Registry http://127.0.0.1:8081; HTTP http://127.0.0.1:8080)

where its Schema Registry listens (``no Schema Registry`` without one), and where its
HTTP listener (metrics, health, the console) is, if it has one: the default port, 8080,
is replaced by a free one when taken.

A process started with port 0 cannot race anything for its port; whoever started it
learns the port from this line, and the line (not "the port accepts connections",
which another process on that port would also satisfy) says the broker is ready.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_READY_LINE = re.compile(r"sluice broker (?P<node_id>\d+) ready on (?P<listeners>.+?) \(data in ")
_REGISTRY_URL = re.compile(r"; Schema Registry (?P<url>http://[^\s,;]+)")
_HTTP_URL = re.compile(r"; HTTP (?P<url>http://\S+?)\)$", re.MULTILINE)
_LISTENER = re.compile(
    r"(?P<name>[A-Za-z0-9_]+) (?P<host>\S+):(?P<port>\d+) \((?P<protocol>[A-Z_]+)\)"
)


@dataclass(frozen=True)
class ReadyListener:
    """One listener of a ready broker: its name, bound address and security protocol."""

    name: str
    host: str
    port: int
    security_protocol: str


def ready_listeners(log_text: str) -> list[ReadyListener] | None:
    """The listeners named by the first ready line in ``log_text``, in the broker's order
    (the first is the one of ``--host``/``--port``); None when no line says ready."""
    line = _READY_LINE.search(log_text)
    if line is None:
        return None
    return [
        ReadyListener(m["name"], m["host"], int(m["port"]), m["protocol"])
        for m in _LISTENER.finditer(line["listeners"])
    ]


def ready_http_url(log_text: str) -> str | None:
    """The HTTP listener's URL named by the first ready line in ``log_text``; None when
    no line says ready or the broker has no HTTP listener (http.port=0)."""
    line = _READY_LINE.search(log_text)
    if line is None:
        return None
    end = log_text.find("\n", line.start())
    url = _HTTP_URL.search(log_text[line.start() : None if end < 0 else end])
    return None if url is None else url["url"]


def ready_schema_registry_url(log_text: str) -> str | None:
    """The Schema Registry's (first) URL named by the first ready line in ``log_text``;
    None when no line says ready or the broker has no registry."""
    line = _READY_LINE.search(log_text)
    if line is None:
        return None
    end = log_text.find("\n", line.start())
    url = _REGISTRY_URL.search(log_text[line.start() : None if end < 0 else end])
    return None if url is None else url["url"]
