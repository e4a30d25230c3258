"""The keys of what the console's application holds (its settings, its templates, the
clients it acts through) and of what each request carries (the clients acting for it).

A module of their own so that ``app`` (which fills them in and routes to the pages) and
the pages (which read them) both import them without importing each other.
"""

from __future__ import annotations

from typing import Any

import jinja2
from aiohttp import web

from sluice.console.clients import CallerClients, ConsoleClients

SETTINGS_KEY = web.AppKey("settings", dict[str, Any])
TEMPLATES_KEY = web.AppKey("templates", jinja2.Environment)
SHARED_CLIENTS_KEY = web.AppKey("shared_clients", ConsoleClients)
"""A console acting with the credentials it was given: its one set of clients."""
CALLER_CLIENTS_KEY = web.AppKey("caller_clients", CallerClients)
"""A console acting as each caller: the clients of each user."""
CLIENTS_KEY = web.RequestKey("clients", ConsoleClients)
"""The clients acting for this request (every page reads and writes through them)."""
