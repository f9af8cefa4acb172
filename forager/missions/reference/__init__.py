"""Reference worker and writer services, so missions run end to end without outside software."""
