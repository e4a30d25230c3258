"""Pages from templates, with what every page shows (the bootstrap address, whether the
console writes, how often live parts refresh), error pages, and the query parameters
and cluster refusals as the pages need them."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from sluice.common.errors import KafkaError
from sluice.console.keys import CLIENTS_KEY, SETTINGS_KEY, TEMPLATES_KEY

REFRESH_S_MIN = 1.0
"""Pages refresh their live parts as often as the sampler samples, at most once a second."""


def format_rate(rate: float | None) -> str:
    if rate is None:
        return "–"
    return f"{rate:,.1f}/s"


def render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    settings = request.app[SETTINGS_KEY]
    clients = request.get(CLIENTS_KEY)
    sampler = None if clients is None else clients.sampler
    body = (
        request.app[TEMPLATES_KEY]
        .get_template(template)
        .render(
            bootstrap=settings["bootstrap"],
            read_only=settings["read_only"],
            interval_s=settings["interval_s"],
            refresh_ms=int(max(settings["interval_s"], REFRESH_S_MIN) * 1000),
            sampler=sampler,
            path=request.path,
            **context,
        )
    )
    return web.Response(text=body, status=status, content_type="text/html")


def error_page(request: web.Request, status: int, title: str, detail: str) -> web.Response:
    return render(request, "error.html", status=status, title=title, detail=detail)


def kafka_detail(error: KafkaError) -> str:
    return str(error).removeprefix(f"{error.code.name.upper()}: ")


def int_query(request: web.Request, name: str, default: int | None) -> int | None:
    text = request.query.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be a whole number, not {text!r}") from None
