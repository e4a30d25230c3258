"""Sluice: a durable, replicated, partitioned event log that speaks the Kafka protocol.

Packages, from the bottom of the dependency order up (see docs/ARCHITECTURE.md):
``common`` → ``protocol`` → ``storage`` → ``cluster`` → ``broker`` / ``client`` → ``cli``.
"""

__version__ = "0.1.0"
