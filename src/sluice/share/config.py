"""Settings of the share coordinator (Kafka's broker property names are in
``common.config``: ``share.coordinator.state.topic.*``; the broker builds the topic
from them, as it does ``__transaction_state``)."""

from __future__ import annotations

SHARE_STATE_TOPIC = "__share_group_state"
"""The compacted internal topic of share-partition state (one snapshot per
share-partition)."""
