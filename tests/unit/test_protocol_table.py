"""The README's protocol coverage table and ``versions.SUPPORTED`` say the same thing:
one row per advertised API with its key, version range and first flexible version.
Internal (broker-to-broker) APIs are served but not advertised, and not listed."""

from __future__ import annotations

import re
from pathlib import Path

from sluice.protocol.versions import ADVERTISED, SUPPORTED, ApiKey, VersionRange

README = Path(__file__).parents[2] / "README.md"
_ROW = re.compile(r"^\|\s*([A-Za-z]+)\s*\|\s*(\d+)\s*\|([^|]*)\|([^|]*)\|")


def _range_text(supported: VersionRange) -> str:
    if supported.min_version == supported.max_version:
        return str(supported.min_version)
    return f"{supported.min_version}-{supported.max_version}"


def _flexible_text(supported: VersionRange) -> str:
    return "-" if supported.first_flexible is None else str(supported.first_flexible)


def _api_name(key: ApiKey) -> str:
    return "".join(part.capitalize() for part in key.name.split("_"))


def expected_row(key: ApiKey, supported: VersionRange) -> str:
    return (
        f"| {_api_name(key)} | {int(key)} | {_range_text(supported)} | "
        f"{_flexible_text(supported)} | <notes> |"
    )


def readme_rows() -> dict[int, tuple[str, str, str]]:
    """Key → (API name, versions, flexible from) of each row of the coverage table."""
    text = README.read_text()
    section = text[text.index("## Protocol coverage") :]
    section = section[: section.index("\n## ", 1)]
    rows: dict[int, tuple[str, str, str]] = {}
    for line in section.splitlines():
        match = _ROW.match(line)
        if match is not None:
            name, key, versions, flexible = (group.strip() for group in match.groups())
            assert int(key) not in rows, f"README: API key {key} has two rows"
            rows[int(key)] = (name, versions, flexible)
    return rows


def table_problems(
    rows: dict[int, tuple[str, str, str]], supported: dict[ApiKey, VersionRange]
) -> list[str]:
    """What to change in the README table so that it matches ``supported``."""
    rows = dict(rows)
    problems = []
    for key, served in sorted(supported.items()):
        row = rows.pop(int(key), None)
        wanted = expected_row(key, served)
        if row is None:
            problems.append(f"missing row (add it to the README table): {wanted}")
        elif row != (_api_name(key), _range_text(served), _flexible_text(served)):
            problems.append(f"row for key {int(key)} is {row}; make it: {wanted}")
    for key, row in sorted(rows.items()):
        problems.append(f"README lists key {key} {row}, which versions.py does not advertise")
    return problems


def test_readme_table_lists_exactly_what_versions_py_advertises() -> None:
    problems = table_problems(readme_rows(), ADVERTISED)
    assert not problems, "README protocol table and versions.SUPPORTED disagree:\n" + "\n".join(
        problems
    )


def test_the_check_names_the_row_to_add_or_fix() -> None:
    rows = readme_rows()
    without_row = {key: row for key, row in rows.items() if key != ApiKey.SASL_HANDSHAKE}
    assert table_problems(without_row, ADVERTISED) == [
        "missing row (add it to the README table): | SaslHandshake | 17 | 0-1 | - | <notes> |"
    ]
    raised = {**ADVERTISED, ApiKey.METADATA: VersionRange(0, 99, 9)}
    [problem] = table_problems(rows, raised)
    assert problem.endswith("make it: | Metadata | 3 | 0-99 | 9 | <notes> |")


def test_internal_apis_are_served_but_not_in_the_table() -> None:
    internal = {key for key, served in SUPPORTED.items() if served.internal}
    assert ApiKey.WRITE_SHARE_GROUP_STATE in internal
    assert not internal & set(ADVERTISED)
    assert not {int(key) for key in internal} & set(readme_rows())
