"""The disk-fault shim (``native/disk_faults.c``): built with gcc, loaded into a real
broker process with LD_PRELOAD, it makes that process's own system calls on its data
directory fail or wait, from the moment a trigger file exists. See the C file for the
kinds of fault. The ``disk_faults_shim`` fixture (conftest) builds it once a session.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from broker_process import BrokerProcess

SHIM_SOURCE = Path(__file__).parent / "native" / "disk_faults.c"
FLUSH_MS = 100
"""flush.ms of a faulty broker's topics: its flusher fsyncs soon after each produce."""


def build_shim(directory: Path) -> Path:
    """Compile the shim into ``directory``; skips the test when gcc is missing."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is needed to build the disk-fault shim")
    library = directory / "disk_faults.so"
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-O2", "-o", str(library), str(SHIM_SOURCE), "-ldl"],
        check=True,
    )
    return library


def faulty_broker(
    data_dir: Path,
    shim: Path,
    kind: str,
    trigger: Path,
    *,
    environment: dict[str, str] | None = None,
) -> BrokerProcess:
    """A broker whose disk gets the fault ``kind`` once ``trigger`` exists (more
    settings of the shim in ``environment``)."""
    return BrokerProcess(
        data_dir,
        overrides={"log.flush.interval.ms": str(FLUSH_MS)},
        environment={
            "LD_PRELOAD": str(shim),
            "DISK_FAULT_KIND": kind,
            "DISK_FAULT_TRIGGER": str(trigger),
            "DISK_FAULT_UNDER": f"{data_dir.resolve()}/",  # not the log beside it
            **(environment or {}),
        },
    )
