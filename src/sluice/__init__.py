"""Sluice: a durable, replicated, partitioned event log that speaks the Kafka protocol.

Packages, from the bottom of the dependency order up (see docs/ARCHITECTURE.md):
``common`` → ``protocol`` → ``storage`` → ``cluster`` → ``broker`` / ``client`` → ``cli``.
"""

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice import sync as sync
    from sluice.client.admin_api import Admin as Admin
    from sluice.client.consumer_api import Consumer as Consumer
    from sluice.client.exactly_once import Output as Output
    from sluice.client.exactly_once import run_exactly_once as run_exactly_once
    from sluice.client.producer_api import Producer as Producer
    from sluice.client.retries import RetryPolicy as RetryPolicy
    from sluice.client.share_consumer import ShareConsumer as ShareConsumer

__all__ = [
    "Admin",
    "Consumer",
    "Output",
    "Producer",
    "RetryPolicy",
    "ShareConsumer",
    "__version__",
    "run_exactly_once",
    "sync",
]


def __getattr__(name: str) -> Any:
    # Imported on first use, so the broker (which never uses the client) does not
    # load it: ``sluice.Producer`` and ``sluice.sync.Producer``.
    if name == "Admin":
        from sluice.client.admin_api import Admin  # noqa: PLC0415

        return Admin
    if name == "Producer":
        from sluice.client.producer_api import Producer  # noqa: PLC0415

        return Producer
    if name == "Consumer":
        from sluice.client.consumer_api import Consumer  # noqa: PLC0415

        return Consumer
    if name == "ShareConsumer":
        from sluice.client.share_consumer import ShareConsumer  # noqa: PLC0415

        return ShareConsumer
    if name == "RetryPolicy":
        from sluice.client.retries import RetryPolicy  # noqa: PLC0415

        return RetryPolicy
    if name in ("Output", "run_exactly_once"):
        from sluice.client import exactly_once  # noqa: PLC0415

        return getattr(exactly_once, name)
    if name == "sync":
        import sluice.sync  # noqa: PLC0415

        return sluice.sync
    raise AttributeError(f"module 'sluice' has no attribute {name!r}")
