"""How a broker is watched: Prometheus metrics on a registry per broker (`metrics/`:
instruments counted per request or batch, collectors that read the broker's state when
scraped) and the HTTP listener that serves them with `/health`, `/ready` and the web
console's application (`http_server`, with its authentication on a secured broker,
`http_auth`). It may read every other part of the broker; only the top level (`app`,
the handlers) imports it."""
