"""Schemas of record keys and values: the three formats of Confluent's Schema Registry
(Avro, JSON Schema, Protobuf) and the wire framing serializers put in front of a value.

What belongs here, all pure (no I/O but a compiler's temporary files, no clock, no
event loop): parsing a schema text with the schemas it references, its canonical and
normalized forms, whether a reader of one schema can read data written with another
(each format's compatibility rules, from a well-kept library where one has them), the
names of its records for the record-name subject strategies, and encoding and decoding
values (:mod:`~sluice.schemas.api` is the interface every format implements,
:func:`~sluice.schemas.api.format_for` picks one; :mod:`~sluice.schemas.wire` is the
magic byte and schema id). The registry that stores schemas is :mod:`sluice.registry`;
the broker, the CLI, the console and Spark use these to check and decode records.
"""
