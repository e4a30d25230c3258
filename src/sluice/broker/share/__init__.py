"""Share groups (KIP-932) on the partitions led here: each group's share-partition with its
acquisitions and lock timer (`partitions`), the members' share sessions (`sessions`), the
store of share-partition state, local or on another broker (`persister`, with the state
batches of Kafka's internal share-state APIs, `state_batches`), and KIP-1191 dead letters
(`dead_letters`). The share groups' pure logic lives in the top-level `sluice.share`."""
