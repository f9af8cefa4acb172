"""Feeds (issue 35, docs/FEEDS.md): scheduled, incremental exports of products, items and price
changes to a directory or the page store."""
