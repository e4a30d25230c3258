"""``sluice serve`` and the pipeline commands refuse what they cannot do in one line on
stderr, with a non-zero status and no traceback; and a data directory remembers which
node and cluster it belongs to (``meta.properties``), as Kafka's log directories do."""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from broker_process import BrokerProcess, free_port
from client_helpers import consume_exactly, create_topic, produce_and_flush, producer_config
from confluent_kafka import Producer
from readme_blocks import README_ADDRESS, readme_blocks

COMMAND_TIMEOUT_S = 60.0
START_LOG_LINES_MAX = 10
"""Lines a start may log up to its ready line: the data directory, the partitions
opened and led (one line each, whatever their number), where HTTP is, the controller,
the coordinators' load, the ready line; a line per __consumer_offsets partition would
be 50 more."""
HTTP_TIMEOUT_S = 10.0
DEFAULT_HTTP_PORT = 8080


def run_sluice(
    *args: str, environment: dict[str, str] | None = None, prefix: Sequence[str] = ()
) -> tuple[int, str]:
    """``python -m sluice ARGS`` to completion (run by the command ``prefix`` when
    given): exit status and stderr."""
    result = subprocess.run(
        [*prefix, sys.executable, "-m", "sluice", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env={**os.environ, **(environment or {})},
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    return result.returncode, result.stderr.decode(errors="replace")


def one_line_error(exit_code: int, stderr: str) -> str:
    """The single ``Error:`` line of a failed command (and no traceback)."""
    assert exit_code != 0, stderr
    assert "Traceback" not in stderr, stderr
    error_lines = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    assert len(error_lines) == 1, stderr
    return error_lines[0]


def serve(data_dir: Path, *extra: str, prefix: Sequence[str] = ()) -> tuple[int, str]:
    """A ``sluice serve`` that must fail before serving (a timeout means it served)."""
    no_http = ("-o", "http.port=0", "-o", "schema.registry.listeners=")
    # Port 0: nothing to race another process for, should it get as far as binding.
    return run_sluice(
        "serve", "--data-dir", str(data_dir), "--port", "0", *no_http, *extra, prefix=prefix
    )


def on_a_read_only_filesystem(mount_point: Path) -> list[str]:
    """A command prefix: what follows runs in a mount namespace of its own, where an
    empty read-only tmpfs is mounted on ``mount_point`` (unseen outside; as a user other
    than root, inside a user namespace too)."""
    user_namespace = [] if os.geteuid() == 0 else ["--map-root-user"]
    mount = 'mount -t tmpfs -o ro,size=1m sluice-read-only "$0" && exec "$@"'
    return ["unshare", "--mount", *user_namespace, "sh", "-c", mount, str(mount_point)]


def test_a_different_node_id_on_an_existing_data_dir_is_refused(tmp_path: Path, topic: str) -> None:
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir, node_id=0)
    broker.start()
    try:
        create_topic(broker.bootstrap, topic)
        produce_and_flush(Producer(producer_config(broker.bootstrap)), topic, [{"value": b"v"}])
    finally:
        assert broker.stop() == 0
    meta = (data_dir / "meta.properties").read_text()
    assert "node.id=0" in meta
    assert "cluster.id=" in meta

    line = one_line_error(*serve(data_dir, "--node-id", "3"))
    assert "node.id=0" in line
    assert "node id 3" in line
    assert "--node-id 0" in line

    # the directory is untouched: node 0 still starts and serves the record
    broker.start()
    try:
        messages = consume_exactly(broker.bootstrap, [(topic, 0)], 1)
        assert messages[0].value() == b"v"
    finally:
        assert broker.stop() == 0


def test_a_data_dir_from_before_meta_properties_still_starts_and_gets_one(
    tmp_path: Path, topic: str
) -> None:
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir, node_id=2)
    broker.start()
    try:
        create_topic(broker.bootstrap, topic)
    finally:
        broker.stop()
    (data_dir / "meta.properties").unlink()  # as a data directory written before it existed

    broker.start()
    try:
        produce_and_flush(Producer(producer_config(broker.bootstrap)), topic, [{"value": b"v"}])
    finally:
        assert broker.stop() == 0
    assert "node.id=2" in (data_dir / "meta.properties").read_text()


def test_a_data_dir_of_another_cluster_is_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir)
    broker.start()
    broker.stop()
    metadata_file = data_dir / "cluster-metadata.json"
    document = json.loads(metadata_file.read_text())
    document["cluster_id"] = "another-cluster-id"
    metadata_file.write_text(json.dumps(document))

    line = one_line_error(*serve(data_dir))
    assert "another-cluster-id" in line
    assert "meta.properties" in line


def test_an_unresolvable_host_is_one_line(tmp_path: Path) -> None:
    line = one_line_error(*serve(tmp_path / "data", "--host", "no-such-host.invalid"))
    assert "--host no-such-host.invalid" in line


def test_a_host_address_this_machine_lacks_is_one_line(tmp_path: Path) -> None:
    line = one_line_error(*serve(tmp_path / "data", "--host", "192.0.2.1"))  # TEST-NET-1
    assert "192.0.2.1" in line


def test_a_failed_listen_leaves_the_data_dir_clean(tmp_path: Path) -> None:
    """Nothing was served, so the logs were closed and the next start need not recover."""
    data_dir = tmp_path / "data"
    one_line_error(*serve(data_dir, "--host", "no-such-host.invalid"))
    broker = BrokerProcess(data_dir)
    broker.start()
    broker.stop()
    assert "recovering" not in broker.log_text()


def test_a_data_dir_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "data"
    a_file.write_text("not a directory")
    line = one_line_error(*serve(a_file))
    assert str(a_file) in line
    assert "not a directory" in line
    line = one_line_error(*serve(a_file / "below"))
    assert str(a_file / "below") in line


def test_a_data_dir_that_cannot_be_created_is_one_line() -> None:
    """/proc and /sys take no directories of ours: not a traceback, but what was wrong."""
    line = one_line_error(*serve(Path("/proc/sluice-data")))
    assert "cannot create the data directory /proc/sluice-data" in line
    assert "pseudo-filesystem" in line
    assert "--data-dir" in line
    line = one_line_error(*serve(Path("/sys/sluice-data/below")))
    assert "cannot create the data directory /sys/sluice-data/below" in line
    assert "--data-dir" in line


def test_a_data_dir_that_takes_no_files_is_one_line() -> None:
    """An existing directory where no file can be created (here /proc/self)."""
    line = one_line_error(*serve(Path("/proc/self")))
    assert "cannot write in the data directory /proc/self" in line
    assert "/proc/self/.lock" in line
    assert "--data-dir" in line


def test_a_data_dir_on_a_read_only_filesystem_is_one_line(tmp_path: Path) -> None:
    mount_point = tmp_path / "read-only"
    mount_point.mkdir()
    prefix = on_a_read_only_filesystem(mount_point)
    line = one_line_error(*serve(mount_point / "data", prefix=prefix))
    assert f"cannot create the data directory {mount_point / 'data'}" in line
    assert "read-only filesystem" in line
    assert "remount it read-write or pass --data-dir another directory" in line
    line = one_line_error(*serve(mount_point, prefix=prefix))
    assert f"cannot write in the data directory {mount_point}" in line
    assert "read-only filesystem" in line
    assert not list(mount_point.iterdir())  # the mount was the child's own


@pytest.mark.parametrize("field", ["cluster_id", "next_producer_id", "topics"])
def test_a_metadata_file_missing_a_field_names_the_file_and_field(
    tmp_path: Path, field: str
) -> None:
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir)
    broker.start()
    broker.stop()
    metadata_file = data_dir / "cluster-metadata.json"
    document = json.loads(metadata_file.read_text())
    del document[field]
    metadata_file.write_text(json.dumps(document))

    line = one_line_error(*serve(data_dir))
    assert str(metadata_file) in line
    assert repr(field) in line
    assert "restore it" in line


def test_a_topic_missing_a_field_in_the_metadata_file_names_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir)
    broker.start()
    broker.stop()
    metadata_file = data_dir / "cluster-metadata.json"
    document = json.loads(metadata_file.read_text())
    del document["topics"]["__consumer_offsets"]["partitions"]
    metadata_file.write_text(json.dumps(document))

    line = one_line_error(*serve(data_dir))
    assert "'__consumer_offsets'" in line
    assert "'partitions'" in line


def test_a_config_file_that_is_not_text_is_one_line(tmp_path: Path) -> None:
    config_file = tmp_path / "broker.properties"
    config_file.write_bytes(b"num.partitions=\xff\n")
    line = one_line_error(*serve(tmp_path / "data", "--config", str(config_file)))
    assert str(config_file) in line


def test_archive_without_pyarrow_is_one_line(tmp_path: Path) -> None:
    """pyarrow is made unimportable for this one subprocess: a directory first on its
    PYTHONPATH holds a ``pyarrow`` package whose import raises ImportError, as a missing
    package does."""
    blocker = tmp_path / "no-pyarrow" / "pyarrow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError(\"No module named 'pyarrow'\")\n")
    python_path = os.pathsep.join(
        [str(blocker.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    exit_code, stderr = run_sluice(
        "archive",
        "--bootstrap-server",
        f"127.0.0.1:{free_port()}",
        "--topic",
        "orders",
        "--output",
        str(tmp_path / "archive"),
        "--until-end",
        environment={"PYTHONPATH": python_path},
    )
    line = one_line_error(exit_code, stderr)
    assert "pyarrow" in line
    assert "pip install 'sluice[spark]'" in line


def test_start_up_log_is_short_new_data_dir_then_clean_restart(tmp_path: Path) -> None:
    """A new data directory is said to be new (not "recovering"), and the group
    coordinator reports its load once with totals, not once per __consumer_offsets
    partition."""
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    assert broker.stop() == 0
    broker.start()
    assert broker.stop() == 0
    first_start, second_start = broker.log_text().split("===== start #")[1:]
    assert "new data directory" in first_start
    assert "recovering" not in first_start
    assert "new data directory" not in second_start
    assert "recovering" not in second_start
    for start_log in (first_start, second_start):
        load_lines = [line for line in start_log.splitlines() if "group coordinator loaded" in line]
        assert len(load_lines) == 1, start_log
        assert "0 group(s) from 50 __consumer_offsets partition(s)" in load_lines[0]


def test_an_unreachable_zookeeper_is_one_line(tmp_path: Path) -> None:
    """Nothing listens on the port: the broker says where it looked and what to check."""
    zookeeper = f"127.0.0.1:{free_port()}"
    timeout = "zookeeper.connection.timeout.ms=1000"
    line = one_line_error(*serve(tmp_path / "data", "--zookeeper", zookeeper, "-o", timeout))
    assert "cannot reach ZooKeeper at 127.0.0.1:" in line
    assert "is it running" in line


def start_logs(broker: BrokerProcess) -> list[str]:
    """Each start's log lines up to and including its ready line."""
    starts = []
    for text in broker.log_text().split("===== start #")[1:]:
        lines = text.splitlines()[1:]  # after the command line
        ready = next(i for i, line in enumerate(lines) if " ready on " in line)
        starts.append(lines[: ready + 1])
    return starts


def test_a_clean_restart_is_quiet_and_rebuilds_no_index(tmp_path: Path, topic: str) -> None:
    """Two batches of 3 KB: a segment past index.interval.bytes (4096) without an index
    entry, which is right (no batch starts 4096 bytes past another) and which every
    clean restart used to rebuild with a warning that read like corruption."""
    broker = BrokerProcess(tmp_path / "data", http_port=0)
    broker.start()
    try:
        create_topic(broker.bootstrap, topic)
        producer = Producer(producer_config(broker.bootstrap, **{"linger.ms": 0}))
        for value in (b"a" * 3000, b"b" * 3000):
            produce_and_flush(producer, topic, [{"value": value}])
        assert broker.stop() == 0
        broker.start()
        assert broker.stop() == 0
        broker.start()
        assert len(consume_exactly(broker.bootstrap, [(topic, 0)], 2)) == 2
    finally:
        assert broker.stop() == 0
    log_text = broker.log_text()
    assert " WARNING " not in log_text, log_text
    assert "rebuilding" not in log_text and "indexing anew" not in log_text, log_text
    for lines in start_logs(broker):
        assert len(lines) < START_LOG_LINES_MAX, "\n".join(lines)
        assert not [line for line in lines if "__consumer_offsets-" in line], lines
        assert f"HTTP {broker.http_url})" in lines[-1]
    assert "opened 51 partition log(s)" in log_text


@contextmanager
def port_taken(port: int) -> Iterator[None]:
    """``port`` on the loopback address is taken while inside: listened on here, or
    already by another process (taken either way)."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        try:
            holder.bind(("127.0.0.1", port))
            holder.listen()
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
        yield
    finally:
        holder.close()


def test_a_taken_default_http_port_is_replaced_by_a_free_one(tmp_path: Path) -> None:
    """Two brokers on one machine: the second finds 8080 taken, says so once and where
    HTTP is instead, and serves it there."""
    with port_taken(DEFAULT_HTTP_PORT):
        broker = BrokerProcess(tmp_path / "data", http_port_default=True)
        broker.start()
        try:
            assert broker.http_port not in (None, DEFAULT_HTTP_PORT)
            with urllib.request.urlopen(f"{broker.http_url}/health", timeout=HTTP_TIMEOUT_S) as r:
                assert r.status == 200
        finally:
            assert broker.stop() == 0
    warnings = [line for line in broker.log_text().splitlines() if " WARNING " in line]
    assert len(warnings) == 1, warnings
    assert f"HTTP port {DEFAULT_HTTP_PORT} on 127.0.0.1 is taken" in warnings[0]
    assert f"on {broker.http_url} instead" in warnings[0]


def test_a_taken_http_port_that_was_asked_for_is_one_line(tmp_path: Path) -> None:
    port = free_port()
    with port_taken(port):
        line = one_line_error(*serve(tmp_path / "data", "-o", f"http.port={port}"))
    assert f"the HTTP port {port} on 127.0.0.1" in line
    assert "already in use" in line
    assert "-o http.port=" in line


README_START_LOG = "INFO sluice.broker.app: new data directory data"
"""The first line of the README's sample of a new broker's start ("Running a broker")."""
LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")


def test_a_new_brokers_start_prints_what_the_readme_shows(tmp_path: Path) -> None:
    """The README's sample start log, line for line (in any order but the ready line
    last), once the test's own port, HTTP port and data directory are put back as the
    README's 9092, 8080, 8081 and ``data``."""
    (shown,) = [
        block.body
        for block in readme_blocks()
        if block.heading == "Running a broker" and block.first_line == README_START_LOG
    ]
    broker = BrokerProcess(tmp_path / "data", http_port=0)
    broker.start()
    assert broker.stop() == 0
    (lines,) = start_logs(broker)
    assert broker.http_url is not None
    printed = [
        LOG_PREFIX.sub("", line)
        .replace(broker.bootstrap, README_ADDRESS)
        .replace(broker.http_url, "http://127.0.0.1:8080")
        .replace(broker.schema_registry_url or "no registry", "http://127.0.0.1:8081")
        .replace(str(broker.data_dir), "data")
        for line in lines
    ]
    expected = shown.splitlines()
    assert printed[-1] == expected[-1]
    assert sorted(printed) == sorted(expected)
