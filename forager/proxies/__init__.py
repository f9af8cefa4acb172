"""Everything about proxies, one concern per module.

- ``selection``: which proxy a fetch uses (``lru``, ``random``, ``exclusive`` leases, the
  hourly budget, the (domain, proxy) rate limit) and the release of an exclusive lease;
- ``health``: what an outcome through a proxy says about it (one classification for crawls,
  test fetches and re-tests), its counters and breaker, the per-domain health view and alerts;
- ``admin``: the pool's CRUD, enable/disable, bulk lines, the test fetch and statistics;
- ``mappings``: domain ↔ proxy mappings;
- ``retest``: the background re-test of proxies their failures disabled.
"""
