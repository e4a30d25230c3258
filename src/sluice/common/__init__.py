"""Vocabulary shared by every layer: identifiers, named limits, the error table,
configuration definitions and the clock. Nothing here does I/O."""
