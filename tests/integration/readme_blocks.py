"""The README's code blocks, for the tests that run them as a newcomer would, a shell
environment in which ``sluice`` is this checkout's command, and a way to run a block."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
README_ADDRESS = "127.0.0.1:9092"
"""The broker address the README's examples use; tests put their broker's instead."""
CODE_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
BLOCK_TIMEOUT_S = 120.0


def blocks(language: str, heading: str | None = None, document: Path = README) -> list[str]:
    """The ``language`` blocks of the README (or of another Markdown ``document``), or
    of its ``## heading`` section only, in order."""
    text = document.read_text()
    if heading is not None:
        text = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    return [body for lang, body in CODE_BLOCK.findall(text) if lang == language]


def sluice_shell_environment(tmp_path: Path, bootstrap: str) -> dict[str, str]:
    """Environment variables for ``sh`` running README commands: ``sluice`` on the PATH
    runs this interpreter's Sluice, against ``bootstrap``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "sluice"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m sluice "$@"\n')
    wrapper.chmod(0o755)
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "SLUICE_BOOTSTRAP_SERVER": bootstrap,
    }


def run(argv: list[str], environment: dict[str, str], stdin: str | None = None) -> str:
    """The standard output of ``argv`` (given ``stdin``) with ``environment`` added,
    which must succeed without a traceback."""
    result = subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **environment},
        timeout=BLOCK_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"{argv}\n{stdin}\nstdout:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout
