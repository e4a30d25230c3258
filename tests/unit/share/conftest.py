"""The share-state runtime tests share the coordinator suite's in-memory log:
``tests/unit/coordinator`` is not a package, so its directory is put on ``sys.path``;
nothing there is changed."""

from __future__ import annotations

import sys
from pathlib import Path

_COORDINATOR_TESTS = Path(__file__).resolve().parents[1] / "coordinator"
if str(_COORDINATOR_TESTS) not in sys.path:
    sys.path.insert(0, str(_COORDINATOR_TESTS))
