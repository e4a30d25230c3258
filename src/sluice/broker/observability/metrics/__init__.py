"""The broker's Prometheus metrics, on a registry of its own (several brokers may share
a process).

Two kinds of parts. Instruments (:mod:`.requests`, :mod:`.traffic`, :mod:`.storage`)
are counted on the hot path, per request or per batch, never per record, into plain
integers and a few histograms. Collectors (:mod:`.partitions`, :mod:`.groups`,
:mod:`.broker_state`) read the broker's state when Prometheus scrapes, so nothing keeps
gauges up to date while requests run. :mod:`.end_offsets` refreshes, in the
background, the end offsets of partitions led by other brokers, for the consumer lag of
groups coordinated here. :mod:`.registry` puts them together; :mod:`.errors` finds the
error codes in a response.
"""
