"""Eligible leader replicas (KIP-966): which replicas outside the ISR may still lead.

Kafka acknowledges an acks=all write only while the ISR holds at least
min.insync.replicas replicas, and the leader moves the high watermark only then (the
strict min ISR rule). So a replica that leaves the ISR while the ISR is below that
minimum has every committed record: nothing could be committed without it. The
partition state keeps such replicas in its ELR, and an election that finds no in-sync
replica to lead takes one of them before it considers anything unclean. A replica whose
broker restarted with its unflushed tail at risk (its machine may have gone down:
:attr:`~sluice.cluster.model.BrokerInfo.logs_intact` is false) is taken out of the ISR
and the ELR.

Every new ISR goes through :func:`with_isr`, whoever decides it (a leader's ISR change
through the controller, the controller's reconcile and elections)::

    new ISR size >= min(min.insync.replicas, replicas)   ELR cleared
    otherwise     ELR = (ELR | old ISR) - new ISR - restarts with the tail at risk

    ISR and ELR never overlap; both are kept in replica order.

The last known ELR holds the partition's last leader while it has none, as Kafka's
controller keeps it by default (its "last known leader" in balanced recovery): set when
the ISR empties, to its last member (the one Sluice keeps in the ISR when every in-sync
broker is down, so the one with every committed record when it last ran), cleared when
the partition has a leader again. When the ISR and the ELR are both empty, that replica
is the last resort, elected uncleanly once it is back. Kafka can also keep every replica
that was once eligible there; electing any of those would be worse than waiting (one
that never led may be the one that lost its tail, which the simulator showed), so Sluice
keeps only the last leader. These are pure functions over
:class:`~sluice.cluster.model.PartitionState`; the controller's rules for using them are
in :mod:`sluice.cluster.leadership`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

from sluice.cluster.model import PartitionState


def effective_min_insync(state: PartitionState, min_insync: int) -> int:
    """min.insync.replicas as the ELR rule counts it: never more than the replicas
    (Kafka's effective min ISR), so a topic asking for more than it has keeps no ELR
    once every replica is in sync."""
    return min(min_insync, len(state.replicas))


def with_isr(
    state: PartitionState,
    isr: Sequence[int],
    min_insync: int,
    tail_at_risk: Collection[int] = (),
) -> PartitionState:
    """``state`` with the ISR ``isr`` and the ELR fields that go with it (the module's
    rule). ``min_insync``: the topic's min.insync.replicas; ``tail_at_risk``: brokers
    that restarted with their tail at risk since the state was written, which may
    not be (or stay) eligible. The version stays the one read, for the conditional
    write."""
    new_isr = tuple(isr)
    if len(new_isr) >= effective_min_insync(state, min_insync):
        return dataclasses.replace(state, isr=new_isr, elr=())
    candidates = {*state.elr, *state.isr}
    elr = tuple(
        r for r in state.replicas if r in candidates and r not in new_isr and r not in tail_at_risk
    )
    if not new_isr and state.isr:
        # The ISR empties (its last member restarted, its tail at risk): that member,
        # which had every committed record when it last ran, is the last known leader.
        last = state.leader if state.leader in state.isr else state.isr[0]
        return dataclasses.replace(state, isr=new_isr, elr=elr, last_known_elr=(last,))
    return dataclasses.replace(state, isr=new_isr, elr=elr)


def with_leader(state: PartitionState, leader: int) -> PartitionState:
    """``state``'s last known ELR once ``leader`` (or NO_LEADER) leads it: emptied when
    the partition has a leader, kept while it has none."""
    if leader >= 0 and state.last_known_elr:
        return dataclasses.replace(state, last_known_elr=())
    return state


def without_tail_at_risk(
    state: PartitionState, tail_at_risk: Collection[int], min_insync: int
) -> PartitionState:
    """``state`` with the replicas that restarted with their tail at risk taken out of
    its ISR and ELR, as Kafka's controller does when such a broker registers. The ISR
    may be left empty: the partition then waits for an ELR member, or elects its last
    leader (the last known ELR) when there is none."""
    if not any(r in tail_at_risk for r in (*state.isr, *state.elr)):
        return state
    isr = tuple(r for r in state.isr if r not in tail_at_risk)
    return with_isr(state, isr, min_insync, tail_at_risk)


def elected_from_elr(state: PartitionState, leader: int) -> PartitionState:
    """The ISR and ELR once ``leader``, an ELR member, is elected: it is the ISR alone,
    and the old ISR's members join the others in the ELR (an ELR exists only while the
    ISR is below min.insync.replicas, which one replica still is). The leader and its
    epoch are the caller's to set."""
    assert leader in state.elr, f"{leader} is not in the ELR {state.elr}"
    candidates = {*state.elr, *state.isr}
    elr = tuple(r for r in state.replicas if r in candidates and r != leader)
    return dataclasses.replace(state, isr=(leader,), elr=elr)


def cleared(state: PartitionState) -> PartitionState:
    """``state`` without ELR fields, after an unclean election: the new leader's log
    is the partition's now, and what the others hold is no longer known to be
    committed."""
    return dataclasses.replace(state, elr=(), last_known_elr=())


def restricted_to(state: PartitionState, replicas: Collection[int]) -> PartitionState:
    """``state`` with its ELR fields limited to ``replicas`` (after a reassignment
    removed some) and never overlapping its ISR."""
    return dataclasses.replace(
        state,
        elr=tuple(r for r in state.elr if r in replicas and r not in state.isr),
        last_known_elr=tuple(
            r for r in state.last_known_elr if r in replicas and r not in state.isr
        ),
    )
