"""Proxy administration: the proxy pool, domain ↔ proxy mappings, health and alerts."""
