"""The broker's side of the Schema Registry (:mod:`sluice.registry`): the HTTP listener
of Confluent's REST API (``schema.registry.listeners``), its authentication and
authorization by subject, the hosting of the registry's shard on the leader of
``_schemas``-0, and the forwarding of calls from any other broker to that leader over
the inter-broker connection (Sluice's private API ``SCHEMA_REGISTRY_CALL``).

Ranked above ``observability`` (its listener reuses the HTTP listener's authentication)
and ``coordination`` (the shard runs on the coordinator runtime); below the broker's
top, which wires it (tests/unit/test_layering.py).
"""
