"""The ``sluice`` executable's entry point (and ``python -m sluice``'s).

kio, the protocol schema library, registers Hypothesis strategies for its types at import
time whenever Hypothesis is importable. Hypothesis is a test dependency; a ``sluice``
process never generates test data, yet on a machine that has it installed (every
development checkout) the registration cost about half a second at each start of a
broker or a command. The entry point therefore hides Hypothesis from the process before
anything imports kio. Code that imports ``sluice.cli.main`` itself (tests) is unaffected.
"""

from __future__ import annotations

import sys


def main() -> None:
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    from sluice.cli.main import main as cli_main  # noqa: PLC0415 (after the line above)

    cli_main()
