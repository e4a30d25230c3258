"""pytest fixtures for testing Kafka code against a real Sluice broker.

Installing sluice registers this plugin (the ``pytest11`` entry point named ``sluice``),
so a test only names a fixture::

    def test_orders(sluice_broker):
        producer = confluent_kafka.Producer({"bootstrap.servers": sluice_broker.bootstrap})

- ``sluice_broker``: one :class:`sluice.testing.Broker` for the whole test session,
  started when a test first asks for it (a session that never does starts nothing).
- ``sluice_broker_factory``: a function making more brokers,
  ``sluice_broker_factory(settings={...}, mode=..., http=...)``, each started at once
  and all stopped when the test ends.

ini options (``pytest.ini``, ``[tool.pytest.ini_options]``, or ``-o name=value``):
``sluice_broker_mode`` (``thread``, the default, or ``process``) and
``sluice_broker_settings`` (``name=value`` lines: settings of the session broker, and
the defaults of the factory's brokers). ``-p no:sluice`` turns the plugin off.

When a test that used a process-mode broker fails, the tail of that broker's log is
added to the test's report.

This module imports nothing of Sluice until a fixture is used, so having the plugin
installed costs a test run that uses no broker nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from sluice.testing.broker import Broker, Mode

MODE_INI = "sluice_broker_mode"
SETTINGS_INI = "sluice_broker_settings"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        MODE_INI,
        "how sluice_broker runs the broker: thread (in this process, the default) or "
        "process (a `python -m sluice serve` child)",
        default="thread",
    )
    parser.addini(
        SETTINGS_INI,
        "broker settings of sluice_broker and sluice_broker_factory, one name=value a line",
        type="linelist",
        default=[],
    )


def _mode(config: pytest.Config) -> Mode:
    mode = str(config.getini(MODE_INI)).strip() or "thread"
    if mode not in ("thread", "process"):
        raise pytest.UsageError(f"{MODE_INI} must be thread or process, not {mode!r}")
    return "thread" if mode == "thread" else "process"


def _settings(config: pytest.Config) -> dict[str, str]:
    settings: dict[str, str] = {}
    for line in config.getini(SETTINGS_INI):
        name, separator, value = str(line).partition("=")
        if not separator or not name.strip():
            raise pytest.UsageError(f"{SETTINGS_INI}: {line!r} is not name=value")
        settings[name.strip()] = value.strip()
    return settings


@pytest.fixture(scope="session")
def sluice_broker(pytestconfig: pytest.Config) -> Iterator[Broker]:
    """A Sluice broker shared by the session's tests (isolate tests by topic name)."""
    from sluice.testing.broker import Broker  # noqa: PLC0415 - only when a test uses it

    with Broker(_settings(pytestconfig), mode=_mode(pytestconfig)) as broker:
        yield broker


class BrokerFactory:
    """``sluice_broker_factory``: makes started brokers and stops them all at the end."""

    def __init__(self, mode: Mode, settings: Mapping[str, str]) -> None:
        self.mode: Mode = mode
        self.settings = dict(settings)
        self.brokers: list[Broker] = []

    def __call__(
        self, settings: Mapping[str, str] | None = None, *, mode: Mode | None = None, **options: Any
    ) -> Broker:
        """A started broker with these settings (over the ini ones); ``options`` are
        :class:`sluice.testing.Broker`'s other arguments (``data_dir``, ``http``...)."""
        from sluice.testing.broker import Broker  # noqa: PLC0415 - only when a test uses it

        broker = Broker({**self.settings, **(settings or {})}, mode=mode or self.mode, **options)
        broker.start()
        self.brokers.append(broker)
        return broker

    def stop_all(self) -> None:
        errors: list[BaseException] = []
        for broker in reversed(self.brokers):
            try:
                broker.stop()
            except Exception as e:
                errors.append(e)
        if errors:
            raise errors[0]


@pytest.fixture
def sluice_broker_factory(
    pytestconfig: pytest.Config,
) -> Iterator[Callable[..., Broker]]:
    """Make extra brokers in a test: ``sluice_broker_factory({"num.partitions": "3"})``."""
    factory = BrokerFactory(_mode(pytestconfig), _settings(pytestconfig))
    try:
        yield factory
    finally:
        factory.stop_all()


LOG_TAIL_CHARACTERS = 10_000


def _brokers_used_by(item: pytest.Item) -> list[Broker]:
    module = sys.modules.get("sluice.testing.broker")
    if module is None:  # no test has used a broker yet
        return []
    found: list[Broker] = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, module.Broker):
            found.append(value)
        elif isinstance(value, BrokerFactory):
            found.extend(value.brokers)
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        for broker in _brokers_used_by(item):
            log = broker.log_text()
            if log:
                report.sections.append(
                    (f"sluice broker log {broker.bootstrap}", log[-LOG_TAIL_CHARACTERS:])
                )
    return report
