"""The keys of what the console's application holds: its client, its sampler, its
settings, its templates and the views found over each topic.

A module of their own so that ``app`` (which fills them in and routes to the pages) and
the pages (which read them) both import them without importing each other.
"""

from __future__ import annotations

from typing import Any

import jinja2
from aiohttp import web

from sluice.client.admin import Admin
from sluice.console import features
from sluice.console.sampler import Sampler

ADMIN_KEY = web.AppKey("admin", Admin)
SAMPLER_KEY = web.AppKey("sampler", Sampler)
SETTINGS_KEY = web.AppKey("settings", dict[str, Any])
TEMPLATES_KEY = web.AppKey("templates", jinja2.Environment)
VIEWS_KEY = web.AppKey("views", dict[str, tuple[float, list[features.ViewOver], bool]])
