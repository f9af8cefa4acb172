"""Politeness: how hard Forager may press each site, shared through the database by every process.

It owns the state that says whether, and how soon, a site may be asked again:

- ``breakers`` — the circuit breakers (seed 002) on domains, proxies and monitors: one
  ``UPDATE`` of ``CASE`` expressions per outcome, transitions read back and recorded;
- ``throttle`` — the adaptive delay a site's pushback (429 / 503, ``Retry-After``) or slowness
  sets beside its configured crawl delay;
- ``bans`` — which failures say the site refused *this client* (429, block and robot-check pages,
  a connection reset through a proxy);
- ``outcomes`` — what one fetch's outcome does to its domain: its breaker and its delay.

What an ``error_type`` does (retried, the proxy rotated, counted against the proxy or the site)
is not decided here but read from ``forager.errors.EFFECTS``. The crawl-delay gate
(``domains.next_fetch_at``) is still taken and opened by ``queue.moves``.

Its place in the layers (``pyproject.toml``): queue → proxies → politeness → fetch. ``proxies``
sits above because a proxy's breaker is written in the same statement as its health counters
(``proxies.health``) and read by its selection; the proxy's side of an outcome is therefore
``proxies.health``'s, and ``worker.policy`` asks both. ``fetch`` imports neither this package
nor the database: a fetcher only fetches.
"""
