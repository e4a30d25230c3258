"""A deterministic simulator of a replicated cluster: brokers running the replication
state machines of `sluice.replication` in one process, over simulated time, network and
disk, with faults drawn from a seed. The same seed replays the same run exactly, event for
event, so a failure found by one of thousands of seeded schedules can be chased.

Parts: `world` (the simulated clock, the one queue of events, and the seeded randomness
every part draws from), `network` (messages between nodes: latency, loss, duplication,
reordering, partitions) and `disk` (a partition's log with the prefix an fsync made
durable; a crash loses the rest). Nothing here reads the real clock, starts a thread or
touches a socket or a file; the broker never imports it."""
