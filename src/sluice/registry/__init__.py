"""The Schema Registry every broker serves: Confluent's REST API over schemas stored in
the compacted, replicated ``_schemas`` topic, with Confluent's record layouts.

What belongs here, sans-IO: the registry as a deterministic coordinator shard (it
replays ``_schemas`` into subjects, versions, ids, compatibility levels and modes, and
answers calls, writing records first where a call changes something), the records'
layouts, Confluent's error codes, and the routes from an HTTP method and path to a call
(:mod:`~sluice.registry.api`: :class:`~sluice.registry.api.Call` in,
:class:`~sluice.registry.api.Answer` out, both plain JSON-able data so a broker can
forward a call to the one that hosts the registry). Formats and their compatibility
rules are :mod:`sluice.schemas`; the HTTP listener, the hosting of the shard on the
leader of ``_schemas``-0 and forwarding are the broker's. This package imports only
``common``, ``schemas`` and ``coordinator``.
"""
