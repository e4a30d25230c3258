"""The README's code blocks, for the tests that run them as a newcomer would, a shell
environment in which ``sluice`` is this checkout's command, and a way to run a block.

Finding blocks. ``blocks(language, heading)`` gives the fenced blocks of one language in
a ``## heading`` section, in order; ``readme_blocks()`` gives every fenced block of the
README (indented ones too) as a ``Block`` whose ``key`` is its nearest heading and its
first line (``"Quick start | sluice topics create orders ..."``), so that editing a
block's body keeps its key. ``test_readme_inventory.py`` lists every key with the test
that runs the block, or why no test can.

Running blocks. Each is run verbatim, with one substitution: the README's broker
address ``127.0.0.1:9092`` becomes the test broker's (the shell gets it through
``SLUICE_BOOTSTRAP_SERVER``, and the text of ``kcat -b`` and Python blocks by
replacement), and so does its Schema Registry's ``http://127.0.0.1:8081`` in Python
blocks. Shell blocks run in one ``sh -e`` each.

Comparing output. A ``text`` block right after a shell block (``shown_after``) is what
the block prints, standard output and error together. ``assert_shows`` compares them
line by line, trailing spaces ignored, exactly except for three things the test says or
the text marks: runs of two or more spaces match any such run (columns widen with their
values); each regular expression in ``varying`` (ids, times, offsets that differ from run
to run) matches wherever the README's text matches it; and a line that is only ``…``
stands for any number of lines the README leaves out.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
README_ADDRESS = "127.0.0.1:9092"
"""The broker address the README's examples use; tests put their broker's instead."""
README_SCHEMA_REGISTRY = "http://127.0.0.1:8081"
"""The Schema Registry the README's examples use; tests put their broker's instead."""
CODE_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
BLOCK_TIMEOUT_S = 120.0
FENCE = re.compile(r"^( *)```(\w*)\s*$")
HEADING = re.compile(r"^#{1,6} (.+)$")
ELIDED = "…"
"""A line of a shown output that stands for any number of printed lines."""
COLUMN_GAP = re.compile(r" {2,}")
KEY_FIRST_LINE_CHARS = 56
"""How much of a block's first line its key keeps (so the inventory's lines stay short)."""


def _first_line(body: str) -> str:
    """A block's first line, spaces collapsed, cut to ``KEY_FIRST_LINE_CHARS``."""
    lines = body.strip().splitlines()
    return " ".join(lines[0].split())[:KEY_FIRST_LINE_CHARS].rstrip() if lines else ""


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown document."""

    heading: str
    """The nearest heading above it, without its ``#``s."""
    language: str
    body: str
    line: int
    """Where its opening fence is (1-based)."""
    ordinal: int
    """1 for the first block of its heading with this first line, 2 for the next..."""

    @property
    def first_line(self) -> str:
        return _first_line(self.body)

    @property
    def key(self) -> str:
        """The block's stable name: its heading and first line (and which of the same,
        when a section repeats a first line)."""
        key = f"{self.heading} | {self.first_line}"
        return key if self.ordinal == 1 else f"{key} ({self.ordinal})"


def readme_blocks(document: Path = README) -> list[Block]:
    """Every fenced block of ``document``, indented ones included, in order."""
    found: list[Block] = []
    seen: dict[tuple[str, str], int] = {}
    heading = ""
    lines = document.read_text().splitlines()
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if fence is None:
            if (match := HEADING.match(lines[index])) is not None:
                heading = match.group(1).strip()
            index += 1
            continue
        indent, language = fence.group(1), fence.group(2)
        end = index + 1
        while end < len(lines) and lines[end].rstrip() != f"{indent}```":
            end += 1
        assert end < len(lines), f"{document.name}:{index + 1}: a code block is never closed"
        body = "".join(line.removeprefix(indent) + "\n" for line in lines[index + 1 : end])
        first = _first_line(body)
        ordinal = seen.get((heading, first), 0) + 1
        seen[(heading, first)] = ordinal
        found.append(Block(heading, language, body, index + 1, ordinal))
        index = end + 1
    return found


def shown_after(block_body: str, document: Path = README) -> str:
    """The ``text`` block that follows the block whose body is ``block_body``: what the
    README shows it prints."""
    every = readme_blocks(document)
    for position, block in enumerate(every[:-1]):
        following = every[position + 1]
        if block.body == block_body and following.language == "text":
            return following.body
    raise AssertionError(f"no text block follows this block:\n{block_body}")


def output_pattern(shown: str, varying: Sequence[str] = ()) -> re.Pattern[str]:
    """A pattern for the whole printed text from a README ``shown`` text (rules in the
    module's docstring)."""
    parts: list[str] = []
    for shown_line in shown.rstrip("\n").splitlines():
        line = shown_line.rstrip()
        if line == ELIDED:
            parts.append(r"(?:[^\n]*\n)*?")
            continue
        pieces: list[tuple[int, int, str]] = []
        for expression in varying:
            pieces += [(m.start(), m.end(), expression) for m in re.finditer(expression, line)]
        pieces += [(m.start(), m.end(), " {2,}") for m in COLUMN_GAP.finditer(line)]
        pattern, position = "", 0
        for start, end, expression in sorted(pieces):
            if start < position:
                continue  # overlaps an earlier match
            pattern += re.escape(line[position:start]) + f"(?:{expression})"
            position = end
        parts.append(pattern + re.escape(line[position:]) + "\n")
    return re.compile("".join(parts))


def assert_shows(printed: str, shown: str, varying: Sequence[str] = ()) -> None:
    """``printed`` is what ``shown`` shows (rules in the module's docstring)."""
    lines = "".join(line.rstrip() + "\n" for line in printed.rstrip("\n").splitlines())
    pattern = output_pattern(shown, varying)
    assert pattern.fullmatch(lines), f"printed:\n{printed}\nthe README shows:\n{shown}"


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


def run(
    argv: list[str],
    environment: dict[str, str],
    stdin: str | None = None,
    *,
    with_errors: bool = False,
) -> str:
    """The standard output of ``argv`` (given ``stdin``) with ``environment`` added,
    which must succeed without a traceback; ``with_errors``: standard output and error
    together, as a terminal shows them."""
    result = subprocess.run(
        argv,
        input=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if with_errors else subprocess.PIPE,
        text=True,
        env={**os.environ, **environment},
        timeout=BLOCK_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"{argv}\n{stdin}\nstdout:\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in (result.stderr or "") + result.stdout, result.stderr
    return result.stdout
