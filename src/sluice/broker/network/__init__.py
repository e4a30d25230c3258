"""The broker's network edge: the asyncio server that owns client connections (framing,
one request at a time, zero-copy fetch answers, connection limits), TLS contexts, and the
broker's own connections to other brokers (replication's and the other inter-broker
requests). Nothing here decides anything about partitions or groups; it imports no other
part of the broker."""
