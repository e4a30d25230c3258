"""The produce form, the console's only write: refused by a read-only console and
unless it carries the app's CSRF token and comes from a page of this console (Origin or
Referer); shown for confirmation first, then written once and redirected to the page
saying where the record went."""

from __future__ import annotations

import hmac
import random
from urllib.parse import quote, urlsplit

from aiohttp import web

from sluice.client.partitioner import partition_for_key
from sluice.client.producer import produce_batch
from sluice.common.ids import TopicPartition
from sluice.console.keys import CLIENTS_KEY, SETTINGS_KEY
from sluice.console.rendering import error_page, int_query, render
from sluice.protocol.records.builder import RecordInput


def _parse_headers(text: str) -> list[tuple[str, bytes]]:
    headers = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, separator, value = line.partition("=")
        if not separator or not name.strip():
            raise web.HTTPBadRequest(text=f"header line {line!r} is not name=value")
        headers.append((name.strip(), value.encode()))
    return headers


def _same_origin(request: web.Request) -> bool:
    """The form was posted from a page of this console: its Origin (or, without one, its
    Referer) names this host."""
    origin = request.headers.get("Origin")
    if origin and origin != "null":
        return urlsplit(origin).netloc == request.host
    referer = request.headers.get("Referer")
    if referer:
        return urlsplit(referer).netloc == request.host
    return False


async def produce(request: web.Request) -> web.Response:
    """The produce form: without ``confirm`` it renders what would be written; with it,
    writes exactly that one record and shows where it went."""
    settings = request.app[SETTINGS_KEY]
    if settings["read_only"]:
        return error_page(request, 403, "Read-only console", "This console does not write.")
    form = await request.post()
    token = str(form.get("csrf_token", ""))
    if not hmac.compare_digest(token, request[CLIENTS_KEY].csrf_token) or not _same_origin(request):
        return error_page(
            request,
            403,
            "Refused",
            "The form did not come from this console (missing or wrong CSRF token, or "
            "another origin). Reload the topic page and try again.",
        )
    admin = request[CLIENTS_KEY].admin
    name = request.match_info["name"]
    topic = await admin.describe_topic(name)
    key_text = str(form.get("key", ""))
    value_text = str(form.get("value", ""))
    headers_text = str(form.get("headers", ""))
    headers = _parse_headers(headers_text)
    key = key_text.encode() if key_text else None
    partition_text = str(form.get("partition", "")).strip()
    if partition_text:
        try:
            partition = int(partition_text)
        except ValueError:
            raise web.HTTPBadRequest(text=f"partition {partition_text!r} is not a number") from None
        topic.partition(partition)
    elif key is not None:
        partition = partition_for_key(key, len(topic.partitions))
    else:
        partition = random.randrange(len(topic.partitions))
    fields = {
        "partition": partition,
        "key": key_text,
        "value": value_text,
        "headers": headers_text,
    }
    if form.get("confirm") != "yes":
        return render(
            request,
            "confirm.html",
            topic=topic,
            fields=fields,
            header_list=[(n, v.decode()) for n, v in headers],
            csrf_token=request[CLIENTS_KEY].csrf_token,
        )
    result = await produce_batch(
        admin.cluster,
        TopicPartition(name, partition),
        [RecordInput(key, value_text.encode(), tuple(headers))],
    )
    # Post/redirect/get: reloading the result page must not write the record again.
    raise web.HTTPSeeOther(
        f"/topics/{quote(name)}/produced?partition={partition}&offset={result.base_offset}"
    )


async def produced_page(request: web.Request) -> web.Response:
    """Where a confirmed test record went (the produce form redirects here)."""
    admin = request[CLIENTS_KEY].admin
    topic = await admin.describe_topic(request.match_info["name"])
    partition = int_query(request, "partition", None)
    offset = int_query(request, "offset", None)
    if partition is None or offset is None:
        raise web.HTTPBadRequest(text="partition and offset are needed")
    return render(request, "produced.html", topic=topic, partition=partition, offset=offset)
