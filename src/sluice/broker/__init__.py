"""The broker process: the asyncio network server, the request dispatcher and the API
handlers (``handlers/``), the replica manager that owns every partition this broker
hosts, the purgatory where produce and fetch requests wait, replication, the
coordinators it hosts (groups, transactions) and its side of transactions (markers,
verification), and ``app``, which wires storage, metadata and the server together and
runs the background tasks.

Storage below is synchronous; the broker calls it on the event loop for appends and
reads (page-cache speed), and in a worker thread for fsync.
"""
