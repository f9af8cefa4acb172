"""What every orchestrator step needs, built once per run: database, settings, secrets, HTTP."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from forager.config import Settings
from forager.crypto import SecretBox
from forager.db.engine import Database
from forager.db.models import WorkerService, Writer
from forager.missions.clients import WorkerServiceAPI, WriterAPI


@dataclass(frozen=True, slots=True)
class Limits:
    """The operator's settings (seed §8.1), read at every loop tick."""

    session_limit: int
    max_retries: int


@dataclass
class Env:
    db: Database
    settings: Settings
    box: SecretBox
    http: httpx.AsyncClient
    # Called when something another part of the loop waits for has happened (a scrape handed
    # to the writer phase, a proxy given back).
    wake: Callable[[], None] = field(default=lambda: None)

    def worker_api(self, worker: WorkerService) -> WorkerServiceAPI:
        return WorkerServiceAPI(
            self.http,
            worker.url,
            self.box.decrypt(worker.api_key),
            self.settings.mission_max_response_bytes,
        )

    def writer_api(self, writer: Writer) -> WriterAPI:
        return WriterAPI(
            self.http,
            writer.url,
            self.box.decrypt(writer.api_key),
            self.settings.mission_max_response_bytes,
        )
