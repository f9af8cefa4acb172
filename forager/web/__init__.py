"""The dashboard: static pages and the few endpoints only it needs (login, live stream)."""
