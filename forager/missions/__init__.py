"""Missions (seed 003): batches scraped by remote worker services and stored by writers."""
