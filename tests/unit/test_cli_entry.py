"""The ``sluice`` entry point keeps Hypothesis (a test dependency kio registers strategies
with at import) out of the process, so a broker or command starts without that cost."""

from __future__ import annotations

import subprocess
import sys

RUN_SLUICE_HELP = """
import runpy, sys
sys.argv = ["sluice", "--help"]
try:
    runpy.run_module("sluice", run_name="__main__")
except SystemExit:
    pass
print("kio loaded:", "kio.static.primitive" in sys.modules)
print("hypothesis loaded:", sys.modules.get("hypothesis") is not None)
"""


def test_python_m_sluice_never_imports_hypothesis() -> None:
    result = subprocess.run(
        [sys.executable, "-c", RUN_SLUICE_HELP],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "Usage" in result.stdout
    assert "kio loaded: True" in result.stdout  # the schemas were loaded...
    assert "hypothesis loaded: False" in result.stdout  # ...without Hypothesis
