"""Politeness: how hard Forager may press each site, shared through the database by every process.

It owns the state that says whether, and how soon, a site may be asked again:

- ``throttle`` — the adaptive delay a site's pushback (429 / 503, ``Retry-After``) or slowness
  sets beside its configured crawl delay;
- ``bans`` — which failures say the site refused *this client* (429, block and robot-check pages,
  a connection reset through a proxy);
- ``outcomes`` — what one fetch's outcome does: to the proxy it went through (its verdict,
  ``proxies.health``, and its lease), then to its domain (the domain's breaker, kept with
  ``db.breakers``, and its delay).

What an ``error_type`` does (retried, the proxy rotated, counted against the proxy or the site)
is not decided here but read from ``forager.errors.EFFECTS``. The crawl-delay gate
(``domains.next_fetch_at``) is still taken and opened by ``queue.moves``.

Its place in the layers (``pyproject.toml``): queue → politeness → proxies → fetch. The queue
claims only domains whose breaker and delay allow it; politeness books an outcome on the proxy
and then on the domain; the circuit-breaker mechanics (``db.breakers``) sit lower still, since
proxies and monitors keep breakers too. ``fetch`` imports neither this package nor the
database: a fetcher only fetches.
"""
