"""A deterministic simulator of a replicated cluster: brokers running the replication
state machines of `sluice.replication` in one process, over simulated time, network and
disk, with faults drawn from a seed. The same seed replays the same run exactly, event for
event, so a failure found by one of thousands of seeded schedules can be chased.

Parts: `world` (the simulated clock, the one queue of events, the seeded randomness
every part draws from, and each node's view of it that a pause stops), `network`
(messages between nodes: latency, loss, delay, duplication, reordering, partitions),
`disk` (a partition's log with the prefix a write-back made durable; a machine crash
loses the rest), `store`, `broker` and `cluster` (the brokers, producers and faults of a
run), `invariants` (what is checked while a run goes), `history` (what is checked at its
end) and `seeds` (many runs side by side). Nothing here reads the real clock, starts a
thread or touches a socket or a file (worker processes run whole seeds); the broker
never imports it."""
