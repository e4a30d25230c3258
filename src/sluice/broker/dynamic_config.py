"""Applying dynamic broker configs at run time.

The metadata store holds them (the cluster-wide level and one level per broker, see
:mod:`sluice.common.dynamic_config`); whenever the image the broker applies changes the
levels that concern it, :class:`DynamicBrokerConfig` lays them over the static config
and copies the result into the config object every part of the broker holds::

    image ─▶ metadata applier ─▶ DynamicBrokerConfig.apply ─▶ live BrokerConfig:
                                   topic defaults (in place) ─▶ every hosted partition
                                                                takes its new config
                                                                (retention, segments,
                                                                max.message.bytes on
                                                                produce, min.insync)
                                   cleaner budget, back-off  ─▶ read at each use
                                   connection limits         ─▶ the listeners, for the
                                                                connections they accept

Partitions are reconfigured by the applier (:mod:`sluice.broker.replication.metadata_applier`) right
after, so a topic without an override follows a changed default at once. The same
happens on start, before any log is opened: a dynamic config survives restarts.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence

from sluice.broker.network.server import Server
from sluice.cluster.image import MetadataImage
from sluice.common.config import BrokerConfig, BrokerConfigError
from sluice.common.dynamic_config import adopt, effective_config

log = logging.getLogger(__name__)


class DynamicBrokerConfig:
    def __init__(self, live: BrokerConfig, servers: Sequence[Server]) -> None:
        self.static = copy.deepcopy(live)
        """The settings the broker started with (STATIC_BROKER_CONFIG and defaults)."""
        self._live = live
        self._servers = list(servers)

    def apply(self, image: MetadataImage) -> None:
        """Take the dynamic levels of ``image`` that concern this broker (on the event
        loop, before its partitions are reconfigured)."""
        cluster_default, per_broker = image.dynamic_broker_configs(self._live.node_id)
        try:
            effective = effective_config(self.static, cluster_default, per_broker)
        except BrokerConfigError as e:
            # Checked when written; only a newer version's value can get here.
            log.warning("dynamic broker configs not applied: %s", e)
            return
        adopt(self._live, effective)
        for server in self._servers:
            server.set_connection_limits(
                max_connections=effective.max_connections,
                max_connections_per_ip=effective.max_connections_per_ip,
                max_connections_per_ip_overrides=effective.max_connections_per_ip_overrides,
            )
        log.info(
            "dynamic broker configs in effect: cluster-wide %s, this broker's %s",
            dict(cluster_default),
            dict(per_broker),
        )
