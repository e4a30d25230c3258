"""The benchmarks are scripts in ``bench/`` importing each other by module name (they are
run as ``python bench/x.py``), so that directory is put on ``sys.path`` for their tests."""

import sys
from pathlib import Path

_BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(_BENCH) not in sys.path:
    sys.path.insert(0, str(_BENCH))
