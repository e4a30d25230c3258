"""Sluice for other people's tests: a real broker started from a test, and pytest fixtures.

What belongs here: what a user needs to test their own Kafka code (any client:
confluent-kafka, kafka-python, aiokafka, Sluice's own) against the real wire protocol
with one import. :class:`Broker` starts a single-node broker on a free loopback port
with a temporary data directory, in a background thread of the test process or as a
``python -m sluice serve`` subprocess; :mod:`sluice.testing.pytest_plugin` (registered
through the ``pytest11`` entry point) gives pytest the ``sluice_broker`` and
``sluice_broker_factory`` fixtures. Nothing here is used by the broker or the client;
it only starts the one and uses the other. docs/testing.md is the user's guide.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.testing.broker import TEST_DEFAULTS as TEST_DEFAULTS
    from sluice.testing.broker import Broker as Broker
    from sluice.testing.broker import BrokerStartError as BrokerStartError

__all__ = ["TEST_DEFAULTS", "Broker", "BrokerStartError"]


def __getattr__(name: str) -> Any:
    # Imported on first use: pytest imports this package to load the plugin in every
    # run, and a run that starts no broker must not pay for importing one (about 3 s).
    if name in __all__:
        from sluice.testing import broker  # noqa: PLC0415

        return getattr(broker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
