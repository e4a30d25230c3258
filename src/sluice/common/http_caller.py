"""Who called the broker's HTTP listener, as the web console needs it to act as that
caller: the user and password the listener checked, and the SCRAM mechanism whose
credential they matched.

The broker's listener authenticates the request and puts an :class:`HttpCaller` under
:data:`CALLER_REQUEST_KEY` on it; the console (which never imports the broker) reads it
there and opens a client authenticated as that user. Pure data, here so both sides
share one definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CALLER_REQUEST_KEY = "sluice.http.caller"
"""The aiohttp request key holding the authenticated :class:`HttpCaller` (absent on a
listener that asks for no credentials)."""


@dataclass(frozen=True)
class HttpCaller:
    """A user the HTTP listener authenticated with HTTP Basic."""

    user: str
    password: str = field(repr=False)
    sasl_mechanism: str
    """The SCRAM mechanism (``SCRAM-SHA-512`` or ``SCRAM-SHA-256``) whose stored
    credential the password matched: the one a client of this user can use."""

    @property
    def principal(self) -> str:
        return f"User:{self.user}"

    def client_options(self) -> dict[str, object]:
        """The client's SASL keywords that authenticate as this caller."""
        return {
            "sasl_mechanism": self.sasl_mechanism,
            "sasl_plain_username": self.user,
            "sasl_plain_password": self.password,
        }
