"""SQLAlchemy 2 typed models: seeds 004/000 plus DESIGN.md (leases, attempts, events).

One module per owning package; importing this package imports them all, so ``Base.metadata``
holds every table (Alembic's autogenerate and ``alembic check`` compare against it).
"""

from forager.db.models.access import ApiKey, DashboardLogout
from forager.db.models.agents import Agent
from forager.db.models.alerts import AlertAttempt, AlertDelivery, AlertEpisode, AlertRule
from forager.db.models.audit import Event
from forager.db.models.base import Base, Timestamped
from forager.db.models.completion import CompletionHook
from forager.db.models.discovery import CrawlJob
from forager.db.models.domains import Domain, DomainSession, SelectorMapVersion
from forager.db.models.feeds import Feed, FeedRun, FeedSequence
from forager.db.models.items import Item, ItemVersion
from forager.db.models.missions import (
    Ad,
    Mission,
    MissionControl,
    ServiceEndpoint,
    WorkerService,
    Writer,
)
from forager.db.models.monitors import Monitor, MonitorSnapshot, ScraperError, ScraperHealthLog
from forager.db.models.products import TAG_PATTERN, PriceHistory, Product, ProductImage, ProductTag
from forager.db.models.proxies import DomainProxy, Proxy
from forager.db.models.tasks import (
    CrawlAttempt,
    CrawlTask,
    DispatchOutbox,
    TaskCount,
    TaskCountDelta,
    TaskCountHourly,
)
from forager.db.models.workers import Worker

__all__ = [
    "TAG_PATTERN",
    "Ad",
    "Agent",
    "AlertAttempt",
    "AlertDelivery",
    "AlertEpisode",
    "AlertRule",
    "ApiKey",
    "Base",
    "CompletionHook",
    "CrawlAttempt",
    "CrawlJob",
    "CrawlTask",
    "DashboardLogout",
    "DispatchOutbox",
    "Domain",
    "DomainProxy",
    "DomainSession",
    "Event",
    "Feed",
    "FeedRun",
    "FeedSequence",
    "Item",
    "ItemVersion",
    "Mission",
    "MissionControl",
    "Monitor",
    "MonitorSnapshot",
    "PriceHistory",
    "Product",
    "ProductImage",
    "ProductTag",
    "Proxy",
    "ScraperError",
    "ScraperHealthLog",
    "SelectorMapVersion",
    "ServiceEndpoint",
    "TaskCount",
    "TaskCountDelta",
    "TaskCountHourly",
    "Timestamped",
    "Worker",
    "WorkerService",
    "Writer",
]
