"""Forager: a self-hosted scraping control plane."""

__version__ = "0.1.0"
