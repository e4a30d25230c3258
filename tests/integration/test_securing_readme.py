"""The README's "Securing Sluice" walkthrough, taken from README.md and run in order as a
newcomer runs it: the openssl commands, users created on a plaintext broker, the broker
restarted with the section's properties, the administrator's commands over SASL (on
the plaintext listener, then on the TLS one with Sluice's client), and the Python
example (alice writes, a wrong password writes nothing).

Adapted, and only this: the walkthrough's ports 9092 and 9093 become free loopback
ports, the two ``sluice serve`` runs the text describes are started by the test (on the
same data directory, the second with the section's properties as its --config), and the
keystore is named by its full path (the broker does not run in the README's directory)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from broker_process import BrokerProcess, free_port
from readme_blocks import (
    assert_shows,
    blocks,
    readme_blocks,
    shown_after,
    sluice_shell_environment,
)

SECTION = "Securing Sluice"
ACLS = "Access control (ACLs)"
TIMEOUT_S = 120.0


def run(argv: list[str], cwd: Path, environment: dict[str, str], stdin: str | None = None) -> str:
    done = subprocess.run(
        argv,
        input=stdin,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **environment},
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{argv}\n{stdin}\n{done.stdout}"
    return done.stdout


def test_the_securing_walkthrough_runs(tmp_path: Path) -> None:
    admin_port, client_port = free_port("127.0.0.1"), free_port("127.0.0.1")

    def ported(text: str) -> str:
        return text.replace("127.0.0.1:9092", f"127.0.0.1:{admin_port}").replace(
            "127.0.0.1:9093", f"127.0.0.1:{client_port}"
        )

    certificates, create_users, administer, administer_over_tls = blocks("sh", SECTION)
    (properties,) = blocks("properties", SECTION)
    (example,) = blocks("python", SECTION)
    # "Access control (ACLs)": its first line starts a broker such as the secured one
    # below; the rest it runs as that broker's administrator.
    (acls,) = [b.body for b in readme_blocks() if b.heading == ACLS and b.language == "sh"]
    serve_line, acl_commands = acls.split("\n", 1)
    assert serve_line == "sluice serve -o authorizer.enabled=true -o 'super.users=User:admin'"
    assert {"authorizer.enabled=true", "super.users=User:admin"} <= set(properties.splitlines())
    environment = sluice_shell_environment(tmp_path, f"127.0.0.1:{admin_port}")
    run(["sh", "-e"], tmp_path, environment, stdin=certificates)
    assert (tmp_path / "broker.pem").exists()

    data = tmp_path / "data"
    plaintext = BrokerProcess(data, port=admin_port)
    plaintext.start()
    try:
        printed = run(["sh", "-e"], tmp_path, environment, stdin=create_users)
        assert_shows(printed, shown_after(create_users))
    finally:
        plaintext.stop()

    # The broker runs from the test's directory: its keystore is named with its path.
    keystore = f"ssl.keystore.location={tmp_path / 'broker.pem'}"
    (tmp_path / "secure.properties").write_text(
        ported(properties).replace("ssl.keystore.location=broker.pem", keystore)
    )
    secure = BrokerProcess(
        data,
        port=admin_port,
        extra_arguments=["--config", str(tmp_path / "secure.properties")],
    )
    # The properties name the listeners; the test's --host/--port agree with the first.
    secure.start()
    try:
        printed = run(["sh", "-e"], tmp_path, environment, stdin=administer)
        assert_shows(printed, shown_after(administer))
        described = run(["sh", "-e"], tmp_path, environment, stdin=ported(administer_over_tls))
        output = run([sys.executable, "-c", ported(example)], tmp_path, environment)
        as_administrator = administer.splitlines()[0]  # the export of the SASL settings
        assert as_administrator.startswith("export SLUICE_SASL_MECHANISM=")
        acls_printed = run(
            ["sh", "-e"], tmp_path, environment, stdin=f"{as_administrator}\n{acl_commands}"
        )
    finally:
        secure.stop()
    assert_shows(described, shown_after(administer_over_tls))
    assert_shows(acls_printed, shown_after(acls))
    lines = [line for line in output.splitlines() if line.startswith("undelivered:")]
    assert lines == ["undelivered: 0", "undelivered: 1"], output
