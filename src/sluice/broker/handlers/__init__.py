"""API handlers, one module per API family; :mod:`sluice.broker.handlers.table` maps each
API key to its handler."""
