"""Imported by the parse processes' fork server (``worker.warmup.PRELOAD``): what every parse
needs is built once there, so each parse process forked from it starts with it built.

Today that is the CLDR tables of currency symbols (``locales``): built lazily on the first
price read otherwise, ~0.3 s of CPU in every parse process.
"""

from __future__ import annotations

from forager.parse import locales

locales.symbol_pattern()
