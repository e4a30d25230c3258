"""Blocking facades of Sluice's client, for code that runs in plain threads::

    import sluice.sync

    with sluice.sync.Producer(bootstrap_servers="127.0.0.1:9092") as producer:
        producer.send("orders", b"hello").result()
"""

from sluice.client.sync import Consumer, Producer

__all__ = ["Consumer", "Producer"]
