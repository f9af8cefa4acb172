"""Row retention (issue 35): the tables that grow with every crawl, poll and alert, pruned in
bounded batches by the scheduler and ``forager prune``; ``sizes`` reports rows and bytes per
table for ``/metrics``. Stored pages have their own retention (``forager.store.retention``)."""
