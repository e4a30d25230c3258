"""Replication as the broker runs it: the partitions hosted here (`replica_manager`), each
partition's leader and follower logic (`partition`: high watermark, ISR, acks=all
outcomes), the fetchers that follow other leaders (`replica_fetcher`, running the decisions of
`sluice.replication.follower`), the leader's fetch-session cache
(`fetch_sessions`), the leaders' ISR writes (`isr`), the metadata applier that turns each
new metadata image into partition changes (`metadata_applier`), and the purgatory where
requests wait on a partition (`purgatory`). It imports the network edge and the broker's
foundation (fatal errors, authorization, request context), nothing above."""
