"""Sluice's messaging features beyond Kafka, as pure logic the broker runs: the filter
language of tag-filtered views (``view_filter``). No I/O here; the broker wires them to
its logs and requests."""
