"""The web console: pages about a cluster's brokers, topics, records and consumer groups,
Sluice's share groups, transactions, delayed records and views, and the Schema
Registry's subjects, served by aiohttp, built only on the client (so it works against
any Kafka cluster and any Confluent-compatible registry).

Modules::

    app                 ``make_app(bootstrap, client_options)``: the aiohttp application, its
                        route table, the clients it acts through, security headers and
                        error pages
    keys                the application's and each request's keys (settings, templates, the
                        clients acting for the request)
    clients             whom the console acts as: its own client, registry client and
                        sampler, or each signed-in user's (behind a broker with SASL or
                        ACLs), bounded and closed when idle, with the views found and the
                        CSRF token of each
    rendering           pages from templates, error pages, query parameters
    pages_cluster       the cluster page, the topics list and a topic's page (offsets,
                        sizes, rates, configs, views over it, its delayed records)
    pages_messages      the message browser
    produce_form        the confirmed, CSRF-protected test produce and its result page
    pages_groups        the groups list, a classic group's and a share group's pages
    pages_transactions  open and hanging transactions
    pages_delays        delayed records waiting in each topic
    pages_schemas       the Schema Registry's subjects, a subject's versions, the diff
                        of two versions with their compatibility messages
    schema_decoding     the message browser's keys and values decoded with their schema
    sampler             end offsets, committed offsets and (classic and share) group
                        descriptions every few seconds, in bounded history (also
                        ``sluice top``'s source)
    brokers             the brokers up and down (since when), their disk use, each
                        partition's state (offline, under-replicated, ok)
    message_filter      the message browser's filter and its merge of partitions
    history_file        the sampler's history on disk (bounded, atomic)
    timeline            a group's rebalance events from two successive samples of it
    features            views, whether delayed delivery is offered, open and hanging
                        transactions: decided from what the client returned
    charts              time series as inline SVG line charts
    formatting          keys, values and headers as text, JSON or hex
"""

from sluice.console.app import make_app

__all__ = ["make_app"]
