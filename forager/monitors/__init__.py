"""Live monitors (issue 15): one URL watched continuously under a ``ScraperContext``."""
