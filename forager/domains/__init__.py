"""Domains: the operator's side of sites (settings, robots.txt, statistics)."""
