"""Eligible leader replicas (KIP-966): the pure ELR rule (``cluster.eligible``), the
controller's elections that use it (``leadership.reconcile`` and ``elect``), and the
partition state's ELR fields in the stores' JSON (old states without them still read)."""

from __future__ import annotations

import uuid
from types import MappingProxyType

from sluice.cluster import eligible
from sluice.cluster.image import MetadataImage
from sluice.cluster.leadership import ElectionType, elect, reconcile
from sluice.cluster.model import NO_LEADER, BrokerInfo, PartitionState, TopicMetadata

A, B, C = 1, 2, 3
MIN_INSYNC = 2


def _state(
    isr: tuple[int, ...],
    leader: int,
    elr: tuple[int, ...] = (),
    last_known_elr: tuple[int, ...] = (),
    replicas: tuple[int, ...] = (A, B, C),
) -> PartitionState:
    return PartitionState(
        replicas, leader, 5, isr, version=9, elr=elr, last_known_elr=last_known_elr
    )


def _image(
    live: dict[int, int], state: PartitionState, clean: frozenset[int] = frozenset()
) -> MetadataImage:
    """Brokers ``live`` (node id → epoch; ``clean``: those whose previous run shut down
    cleanly) and one topic "t" with partition 0 in ``state``, min.insync.replicas=2."""
    brokers = {
        n: BrokerInfo(n, "127.0.0.1", 9092 + n, epoch=e, logs_intact=n in clean)
        for n, e in live.items()
    }
    topic = TopicMetadata("t", uuid.uuid4(), {0: state}, {"min.insync.replicas": "2"})
    return MetadataImage("c", MappingProxyType(brokers), None, MappingProxyType({"t": topic}))


def _reconciled(
    image: MetadataImage, restarted: tuple[int, ...] = (), min_insync: int = MIN_INSYNC
) -> PartitionState | None:
    changes = reconcile(image, restarted, min_insync=lambda topic: min_insync)
    assert len(changes) <= 1
    return changes[0].state if changes else None


# ── the rule ─────────────────────────────────────────────────────────────────────────


def test_a_replica_leaving_an_isr_that_falls_below_min_insync_joins_the_elr() -> None:
    state = eligible.with_isr(_state((A, B, C), A), (A, B), MIN_INSYNC)
    assert (state.isr, state.elr) == ((A, B), ()), "still at min.insync.replicas: no ELR"
    state = eligible.with_isr(state, (A,), MIN_INSYNC)
    assert (state.isr, state.elr, state.last_known_elr) == ((A,), (B,), ())
    assert state.version == 9, "the version stays the one read, for the conditional write"


def test_the_elr_is_cleared_once_the_isr_is_back_at_min_insync() -> None:
    state = eligible.with_isr(_state((A,), A, elr=(B, C)), (A, C), MIN_INSYNC)
    assert (state.isr, state.elr, state.last_known_elr) == ((A, C), (), ())


def test_a_replica_rejoining_the_isr_while_still_below_min_insync_leaves_the_elr() -> None:
    state = eligible.with_isr(_state((A,), A, elr=(B, C)), (A, B), 3)
    assert (state.isr, state.elr) == ((A, B), (C,)), "ISR and ELR never overlap"


def test_an_unclean_restart_is_not_eligible() -> None:
    state = eligible.with_isr(_state((A, B), A), (A,), MIN_INSYNC, tail_at_risk={B})
    assert (state.isr, state.elr, state.last_known_elr) == ((A,), (), ())


def test_the_last_known_elr_is_the_last_member_of_an_isr_that_empties() -> None:
    emptied = eligible.with_isr(_state((A,), A, elr=(B,)), (), MIN_INSYNC, tail_at_risk={A})
    assert (emptied.isr, emptied.elr, emptied.last_known_elr) == ((), (B,), (A,))
    offline = eligible.with_leader(emptied, NO_LEADER)
    assert offline.last_known_elr == (A,), "kept while the partition has no leader"
    assert eligible.with_leader(offline, B).last_known_elr == (), "cleared once it has one"


def test_min_insync_above_the_replication_factor_counts_as_the_replication_factor() -> None:
    state = eligible.with_isr(_state((A, B), A, replicas=(A, B)), (A, B), 3)
    assert state.elr == (), "every replica in sync: nothing is eligible outside the ISR"


def test_the_stores_json_keeps_the_elr_fields_and_reads_states_without_them() -> None:
    state = _state((A,), A, elr=(B,), last_known_elr=(C,))
    document = state.to_json()
    assert PartitionState.from_json(document, 9) == state
    old = {"replicas": [A, B, C], "leader": A, "leader_epoch": 5, "isr": [A]}
    assert PartitionState.from_json(old, 9) == _state((A,), A)
    assert "elr" not in _state((A, B), A).to_json(), "no ELR, no new keys"


def test_a_registration_says_whether_the_logs_are_intact() -> None:
    broker = BrokerInfo(A, "h", 1, logs_intact=True)
    assert BrokerInfo.from_json(broker.to_json()).logs_intact
    old = {"node_id": A, "host": "h", "port": 1, "rack": None}
    assert not BrokerInfo.from_json(old).logs_intact, "unknown counts as unclean"
    earlier = {**old, "clean_shutdown": True}
    assert BrokerInfo.from_json(earlier).logs_intact, "the key's earlier name"


# ── the controller's elections ───────────────────────────────────────────────────────


def test_the_last_isr_member_restarting_with_a_lost_tail_does_not_lead_the_elr_member_does() -> (
    None
):
    """The case KIP-966 exists for. ISR {A, B}, min.insync.replicas 2: B drops out (the
    ISR is {A}, B has every committed record); A crashes losing its unflushed tail and
    restarts. Before ELR, A led (the only in-sync replica) and B truncated to it."""
    before = eligible.with_isr(_state((A, B), A), (A,), MIN_INSYNC)
    assert before.elr == (B,)
    # A registered anew (epoch 7 > the controller's 0) after an unclean shutdown.
    state = _reconciled(_image({A: 7, B: 0, C: 0}, before), restarted=(A,))
    assert state is not None
    assert (state.leader, state.leader_epoch) == (B, 6)
    assert (state.isr, state.elr, state.last_known_elr) == ((B,), (), ())


def test_of_two_in_sync_replicas_back_together_the_one_with_intact_logs_leads() -> None:
    """Seed 727. ISR {A, B}, A leading, min.insync.replicas 2; while no controller acts,
    A's machine crashes (its unsynced tail lost) and B is killed (its page cache, and so
    every record, survives). Both register anew: B with its logs intact, A not. B leads;
    A leaves the ISR (it rejoins once caught up)."""
    before = _state((A, B), A)
    image = _image({A: 7, B: 8, C: 0}, before, clean=frozenset({B}))
    state = _reconciled(image, restarted=(A, B))
    assert state is not None
    assert (state.leader, state.leader_epoch) == (B, 6)
    assert (state.isr, state.elr, state.last_known_elr) == ((B,), (), ())


def test_a_clean_restart_of_the_last_isr_member_leads_again() -> None:
    before = _state((A,), A, elr=(B,))
    state = _reconciled(_image({A: 7, B: 0}, before, clean=frozenset({A})), restarted=(A,))
    assert state is not None
    assert (state.leader, state.isr, state.elr) == (A, (A,), (B,))


def test_while_the_elr_member_is_down_the_partition_waits_offline_for_it() -> None:
    before = _state((A,), A, elr=(B,))
    state = _reconciled(_image({A: 7, C: 0}, before), restarted=(A,))
    assert state is not None
    assert (state.leader, state.isr, state.elr, state.last_known_elr) == (
        NO_LEADER,
        (),
        (B,),
        (A,),
    ), "A lost its tail: out of the ISR, so that it is not trusted later"
    assert _reconciled(_image({A: 7, C: 0}, state)) is None, "still waiting"
    back = _reconciled(_image({A: 7, B: 8, C: 0}, state, clean=frozenset({B})), (B,))
    assert back is not None
    assert (back.leader, back.isr, back.elr, back.last_known_elr) == (B, (B,), (), ())


def test_when_every_eligible_replica_lost_its_tail_the_last_known_one_leads() -> None:
    waiting = _state((), NO_LEADER, elr=(B,), last_known_elr=(A,))
    state = _reconciled(_image({A: 0, B: 8}, waiting), restarted=(B,))
    assert state is not None
    assert (state.leader, state.isr, state.elr, state.last_known_elr) == (A, (A,), (), ())


def test_a_live_elr_member_leads_when_the_last_isr_member_is_down() -> None:
    state = _reconciled(_image({B: 0, C: 0}, _state((A,), A, elr=(B,))))
    assert state is not None
    assert (state.leader, state.isr, state.elr) == (B, (B,), (A,))


def test_an_elr_member_that_restarted_uncleanly_is_no_longer_eligible() -> None:
    state = _reconciled(_image({A: 0, B: 7}, _state((A,), A, elr=(B,))), restarted=(B,))
    assert state is not None
    assert (state.leader, state.leader_epoch) == (A, 5), "the leader stays"
    assert (state.isr, state.elr, state.last_known_elr) == ((A,), (), ())


def test_a_replica_that_never_led_and_lost_its_tail_does_not_lead_the_last_leader_does() -> None:
    """Found by the simulator (its seed 85 before this rule). ISR {A, B}, min ISR 2, A
    leads: B machine-crashes (its unsynced tail lost), A drops it into the ELR, B comes
    back uncleanly while the controller is paused (no longer eligible); then A's session
    ends: the partition goes offline with ISR {A}. A comes back, counted unclean too:
    the ISR empties and A, its last member, is the last known leader: it has every
    committed record. B must not lead (it was never leader and lost records);
    A does, as Kafka's last known leader."""
    first_b = (B, A, C)  # B before A in replica order: no accident of the order saves A
    shrunk = eligible.with_isr(_state((A, B), A, replicas=first_b), (A,), MIN_INSYNC)
    assert shrunk.elr == (B,)
    offline = _reconciled(_image({B: 7, C: 0}, shrunk), restarted=(B,))
    assert offline is not None
    assert (offline.leader, offline.isr, offline.elr) == (NO_LEADER, (A,), ())
    back = _reconciled(_image({A: 9, B: 7, C: 0}, offline), restarted=(A,))
    assert back is not None
    assert (back.leader, back.isr) == (A, (A,)), "the last leader, not B"


def test_an_isr_member_that_stayed_up_leads_before_any_elr_member() -> None:
    state = _reconciled(_image({B: 0, C: 0}, _state((A, C), A, elr=(B,))), min_insync=3)
    assert state is not None
    assert (state.leader, state.isr, state.elr) == (C, (C,), (A, B))


def test_a_dead_follower_leaving_an_isr_at_min_insync_joins_the_elr() -> None:
    state = _reconciled(_image({A: 0, C: 0}, _state((A, B), A)))
    assert state is not None
    assert (state.leader, state.leader_epoch, state.isr, state.elr) == (A, 5, (A,), (B,))


def test_unclean_election_comes_only_after_the_elr_and_clears_it() -> None:
    image = _image({C: 0}, _state((A,), A, elr=(B,)))
    offline = _reconciled(image)
    assert offline is not None and offline.leader == NO_LEADER, "unclean election is off"
    changes = reconcile(image, (), lambda topic: True, lambda topic: MIN_INSYNC)
    (unclean,) = [change.state for change in changes]
    assert (unclean.leader, unclean.isr, unclean.elr, unclean.last_known_elr) == (C, (C,), (), ())


def test_elect_leaders_unclean_takes_a_live_elr_member_first() -> None:
    outcome = elect(_state((A,), A, elr=(B,)), ElectionType.UNCLEAN, {B, C})
    assert outcome.state is not None
    assert (outcome.state.leader, outcome.state.isr, outcome.state.elr) == (B, (B,), (A,))
    without_elr = elect(_state((A,), A), ElectionType.UNCLEAN, {C})
    assert without_elr.state is not None and without_elr.state.leader == C


def test_a_reassignment_drops_removed_replicas_from_the_elr() -> None:
    state = eligible.restricted_to(_state((A,), A, elr=(B, C)), {A, B})
    assert state.elr == (B,)
