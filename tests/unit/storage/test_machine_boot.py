"""Whether the machine went down since a data directory's last start, by the boot id."""

from __future__ import annotations

from pathlib import Path

from sluice.storage.machine_boot import (
    BOOT_ID_PATH,
    BOOT_RECORD_NAME,
    current_boot_id,
    record_boot,
    same_boot_as_previous_run,
)


def _boot(tmp_path: Path, boot_id: str) -> Path:
    source = tmp_path / "boot_id"
    source.write_text(boot_id + "\n")
    return source


def test_a_start_under_the_boot_recorded_is_the_same_boot(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    source = _boot(tmp_path, "b1")
    assert not same_boot_as_previous_run(data, source), "a new data directory"
    record_boot(data, source)
    assert same_boot_as_previous_run(data, source)
    assert (data / BOOT_RECORD_NAME).read_text() == "b1\n"


def test_another_boot_means_the_machine_may_have_gone_down(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    record_boot(data, _boot(tmp_path, "b1"))
    rebooted = _boot(tmp_path, "b2")
    assert not same_boot_as_previous_run(data, rebooted)
    record_boot(data, rebooted)
    assert same_boot_as_previous_run(data, rebooted)


def test_a_system_without_a_boot_id_never_counts_as_the_same_boot(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    record_boot(data, _boot(tmp_path, "b1"))
    missing = tmp_path / "no-such-file"
    assert current_boot_id(missing) is None
    assert not same_boot_as_previous_run(data, missing)
    record_boot(data, missing)
    assert not (data / BOOT_RECORD_NAME).exists(), "no stale record left behind"


def test_this_machine_names_its_boot() -> None:
    # The broker's platform (Linux) names each boot; the rule rests on it.
    boot_id = current_boot_id()
    assert boot_id is not None and boot_id == BOOT_ID_PATH.read_text().strip()
