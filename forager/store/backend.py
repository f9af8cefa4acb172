"""Which page store the settings ask for: one place, called by the composition root."""

from __future__ import annotations

from forager.config import Settings
from forager.store.pages import LocalPageStore, PageStore


def open_page_store(settings: Settings) -> PageStore:
    """``FORAGER_PAGE_STORE=s3://bucket/prefix``: S3; otherwise the local directory."""
    s3 = settings.s3_bucket
    if s3 is None:
        return LocalPageStore(settings.pages_dir, settings.page_compression_level)
    assert settings.s3_secret_access_key is not None  # the settings refuse it missing
    from forager.store.s3 import S3PageStore  # httpx and its signing: S3 stores only

    bucket, prefix = s3
    return S3PageStore(
        settings.s3_endpoint,
        bucket,
        prefix,
        region=settings.s3_region,
        access_key_id=settings.s3_access_key_id,
        secret_access_key=settings.s3_secret_access_key,
        timeout=settings.s3_timeout_seconds,
        compresslevel=settings.page_compression_level,
    )
