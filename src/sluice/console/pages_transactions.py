"""The transactions page: every transactional id with what its coordinator says of it,
open ones first and those open past their timeout marked; against a cluster without
these APIs (or ACLs that refuse them) the page says so."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from sluice.client.admin_transactions import (
    TransactionDescription,
    TransactionListing,
    describe_transactions,
    list_transactions,
)
from sluice.client.errors import UnsupportedApiError
from sluice.common.errors import KafkaError
from sluice.console import features
from sluice.console.keys import CLIENTS_KEY
from sluice.console.rendering import kafka_detail, render

TRANSACTIONS_MAX = 200
"""Transactional ids described on one load of the transactions page (open ones first)."""
DESCRIBE_TRANSACTION_TIMEOUT_S = 5.0


def _refusal(error: KafkaError | UnsupportedApiError) -> str:
    if isinstance(error, KafkaError):
        return f"{error.code.name.replace('_', ' ')}: {kafka_detail(error)}"
    return str(error)


async def transactions_page(request: web.Request) -> web.Response:
    """Every transactional id (ListTransactions) with what its coordinator says of it
    (DescribeTransactions): open ones first, those open past their timeout marked."""
    admin = request[CLIENTS_KEY].admin
    try:
        listings = await list_transactions(admin.cluster)
    except (KafkaError, UnsupportedApiError) as e:
        # An older Kafka without these APIs, or ACLs that refuse them: say so.
        return render(request, "transactions.html", rows=[], refused=_refusal(e), capped=0)
    ordered = features.listing_order(listings)
    shown = ordered[:TRANSACTIONS_MAX]

    async def describe(listing: TransactionListing) -> TransactionDescription | None:
        try:
            (described,) = await describe_transactions(
                admin.cluster,
                [listing.transactional_id],
                timeout_s=DESCRIBE_TRANSACTION_TIMEOUT_S,
            )
        except (KafkaError, UnsupportedApiError):
            return None  # expired meanwhile, or refused: the listing is all there is
        return described

    descriptions = await asyncio.gather(*(describe(listing) for listing in shown))
    now_ms = int(time.time() * 1000)
    rows = features.row_order(
        features.transaction_row(listing, description, now_ms)
        for listing, description in zip(shown, descriptions, strict=True)
    )
    return render(
        request,
        "transactions.html",
        rows=rows,
        refused="",
        capped=len(ordered) - len(shown),
        is_open=features.is_open,
    )
