"""The Kafka wire protocol, sans I/O: framing, request headers, the request/response
codec (over kio), the table of supported API versions, the client half of the protocol
(``client``), and record batches (``records``).

Bytes in, messages out; messages in, bytes out. Nothing here imports asyncio or sockets.
"""
