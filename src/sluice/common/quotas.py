"""Client quotas as Kafka has them (KIP-13, KIP-55, KIP-124, KIP-219): pure logic.

A quota entity names a user, a client id, or both; either may be ``<default>`` (any
user / any client id without a more specific entry). Each quota type
(``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``) is resolved on
its own, for a request's (user, client id), by Kafka's precedence::

    user + client-id, user + <default> client-id, user,
    <default> user + client-id, <default> user + <default> client-id, <default> user,
    client-id, <default> client-id

The first entity with that quota type set gives the bound. Clients that resolve to the
same entity share one rate, as in Kafka: a quota set for ``user=alice`` alone is shared
by every client id alice uses, while ``user=<default>`` gives each user a rate of its own.

A rate is measured over ``quota.window.num`` samples of ``quota.window.size.seconds``
(Kafka's SampledStat and Rate: the elapsed time counts at least ``num - 1`` whole
windows, so a quiet client may burst about that many windows' worth at first). When a
recording takes the rate past the bound, the throttle time is Kafka's
``(observed - bound) / bound × window``, capped at the whole window the rate is measured
over (``quota.window.num × quota.window.size.seconds``), so one throttle never outlasts
the measurement; a bound of 0 throttles every recording for one sample window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT = "<default>"
"""A user or client id standing for every one without an entry of its own."""

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_TYPES = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)

USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)

QUOTA_WINDOW_NUM_DEFAULT = 11
QUOTA_WINDOW_SIZE_SECONDS_DEFAULT = 1


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """Who a quota is for: a user, a client id, or both (None: not part of the entity;
    ``<default>``: any)."""

    user: str | None = None
    client_id: str | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise ValueError("a quota entity names a user, a client id, or both")

    @property
    def key(self) -> str:
        """A stable text form, e.g. ``user=alice,client-id=<default>`` (storage key)."""
        parts = []
        if self.user is not None:
            parts.append(f"{USER}={self.user}")
        if self.client_id is not None:
            parts.append(f"{CLIENT_ID}={self.client_id}")
        return ",".join(parts)

    @classmethod
    def from_key(cls, key: str) -> QuotaEntity:
        values: dict[str, str] = {}
        for part in key.split(","):
            name, _, value = part.partition("=")
            if name not in ENTITY_TYPES or name in values:
                raise ValueError(f"not a quota entity: {key!r}")
            values[name] = value
        return cls(values.get(USER), values.get(CLIENT_ID))


def candidates(user: str, client_id: str) -> list[QuotaEntity]:
    """The entities that may hold the quota of ``(user, client_id)``, first match wins."""
    return [
        QuotaEntity(user, client_id),
        QuotaEntity(user, DEFAULT),
        QuotaEntity(user, None),
        QuotaEntity(DEFAULT, client_id),
        QuotaEntity(DEFAULT, DEFAULT),
        QuotaEntity(DEFAULT, None),
        QuotaEntity(None, client_id),
        QuotaEntity(None, DEFAULT),
    ]


@dataclass(frozen=True, slots=True)
class ResolvedQuota:
    bound: float
    bucket: tuple[str | None, str | None]
    """Whose rate is measured against ``bound``: the matched entity with its
    ``<default>`` parts replaced by the client's own user and client id."""


def resolve(
    quotas: Mapping[QuotaEntity, Mapping[str, float]],
    quota_type: str,
    user: str,
    client_id: str,
) -> ResolvedQuota | None:
    """The quota of ``quota_type`` for a client, or None when it has none."""
    for entity in candidates(user, client_id):
        values = quotas.get(entity)
        if values is None or quota_type not in values:
            continue
        return ResolvedQuota(
            bound=values[quota_type],
            bucket=(
                None if entity.user is None else user,
                None if entity.client_id is None else client_id,
            ),
        )
    return None


@dataclass(frozen=True, slots=True)
class WindowConfig:
    samples: int = QUOTA_WINDOW_NUM_DEFAULT
    """quota.window.num"""
    sample_seconds: float = QUOTA_WINDOW_SIZE_SECONDS_DEFAULT
    """quota.window.size.seconds"""


@dataclass(slots=True)
class SampledRate:
    """Kafka's Rate over a SampledStat: ``samples`` windows of ``sample_seconds``."""

    config: WindowConfig
    _starts: list[float] = field(default_factory=list)
    _totals: list[float] = field(default_factory=list)

    def record(self, value: float, now: float) -> None:
        self._purge(now)
        if not self._starts or now >= self._starts[-1] + self.config.sample_seconds:
            self._starts.append(now)
            self._totals.append(0.0)
            if len(self._starts) > self.config.samples:
                del self._starts[0], self._totals[0]
        self._totals[-1] += value

    def unrecord(self, value: float, now: float) -> None:
        """Take back a recording (Kafka does for a throttled fetch's response, which
        is not sent)."""
        if self._totals:
            self._totals[-1] -= value

    def _purge(self, now: float) -> None:
        """Drop samples older than the whole window (Kafka's purgeObsoleteSamples)."""
        horizon = now - self.config.samples * self.config.sample_seconds
        while self._starts and self._starts[0] <= horizon:
            del self._starts[0], self._totals[0]

    def window_seconds(self, now: float) -> float:
        """The time the rate is measured over: since the oldest sample began, at least
        ``samples - 1`` whole windows (Kafka's Rate.windowSize)."""
        size = self.config.sample_seconds
        elapsed = now - self._starts[0] if self._starts else 0.0
        full_windows = int(elapsed // size)
        minimum = self.config.samples - 1
        if full_windows < minimum:
            elapsed += (minimum - full_windows) * size
        return elapsed

    def measure(self, now: float) -> float:
        self._purge(now)
        return sum(self._totals) / self.window_seconds(now)


def throttle_ms(rate: SampledRate, bound: float, now: float) -> int:
    """How long a client whose rate is ``rate`` is throttled: 0 within the bound, else
    ``(observed - bound) / bound × window``, capped at the whole window."""
    if bound <= 0:
        return int(rate.config.sample_seconds * 1000)
    observed = rate.measure(now)
    if observed <= bound:
        return 0
    window_ms = rate.window_seconds(now) * 1000
    throttle = (observed - bound) / bound * window_ms
    whole_window_ms = rate.config.samples * rate.config.sample_seconds * 1000
    return int(min(throttle, whole_window_ms))


def parse_quota_value(quota_type: str, value: float) -> float:
    """A quota value checked as Kafka checks it: byte rates are whole non-negative
    numbers, request_percentage a positive number."""
    if quota_type not in QUOTA_TYPES:
        raise ValueError(f"unknown quota type {quota_type!r}; known: {', '.join(QUOTA_TYPES)}")
    if quota_type == REQUEST_PERCENTAGE:
        if value <= 0:
            raise ValueError(f"{quota_type} must be positive, not {value}")
        return float(value)
    if value < 0 or value != int(value):
        raise ValueError(f"{quota_type} must be a whole number of bytes per second, not {value}")
    return float(value)
