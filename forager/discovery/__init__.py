"""Discovery (issue 32): crawl jobs that find their own URLs — scope, rules, links, budgets."""
