"""Blocking facades of Sluice's client, for code that runs in plain threads.

::

    import sluice.sync

    with sluice.sync.Producer(bootstrap_servers="127.0.0.1:9092") as producer:
        producer.send("orders", b"hello").result()

    with sluice.sync.Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        print([topic.name for topic in admin.list_topics()])
"""

from sluice.client.sync import Admin, Consumer, Producer, ShareConsumer

__all__ = ["Admin", "Consumer", "Producer", "ShareConsumer"]
