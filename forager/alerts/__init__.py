"""Alerts (issue 17): rules, change detection into an outbox, and signed deliveries."""
