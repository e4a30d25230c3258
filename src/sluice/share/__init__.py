"""Share groups (KIP-932): queues on a topic.

What belongs here, as pure logic with no I/O: the share-partition state that is persisted
and the interface of the store that keeps it (:mod:`~sluice.share.state`); the
coordinator of ``__share_group_state`` that persists it: its records
(:mod:`~sluice.share.state_records`), its shard of the generic coordinator runtime
(:mod:`~sluice.share.state_coordinator`), the runtime that routes a share-partition to
its partition (:mod:`~sluice.share.state_runtime`) and its settings
(:mod:`~sluice.share.config`); the share-partition's in-flight records (acquire, acknowledge,
release, lock expiry, delivery counts). Share-group membership lives with the classic
groups in :mod:`sluice.group` (one group id names one group of either kind); sessions,
the wire messages and dead-letter writes belong to the broker. This package imports only
``common``, ``protocol``, ``storage`` and ``coordinator``.
"""
