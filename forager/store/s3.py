"""Pages in an S3-compatible bucket (AWS S3, SeaweedFS, MinIO): ``FORAGER_PAGE_STORE=s3://…``.

Plain HTTP through httpx (already Forager's client) with SigV4 signatures from ``httpx-auth``:
four operations (PUT, GET, HEAD, DELETE on one object, plus one listing to check the bucket)
do not need an SDK. Requests are path-style (``<endpoint>/<bucket>/<prefix>/<key>``), which
every S3-compatible server answers.

A PUT either completes (S3 stores an object whole or not at all) or raises ``PageStoreError``;
the pipeline records a page key only after ``put`` returned it, so no row points at a page
that was never written. The secret key never appears in an error or a log line.
"""

from __future__ import annotations

import asyncio
import gzip
import re
from pathlib import Path

import httpx
from httpx_auth import AWS4Auth
from pydantic import SecretStr

from forager.errors import PageStoreError
from forager.store.pages import page_key

_CODE = re.compile(rb"<Code>([^<]+)</Code>")
_KEY = re.compile(r"[A-Za-z0-9._/-]+")
_CREDENTIAL_ERRORS = frozenset(
    {"SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "InvalidToken"}
)


class S3PageStore:
    """Pages as gzip objects under ``prefix`` in ``bucket``."""

    def __init__(
        self,
        endpoint: str,
        bucket: str,
        prefix: str,
        *,
        region: str,
        access_key_id: str,
        secret_access_key: SecretStr,
        timeout: float = 30.0,
        compresslevel: int = 3,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.compresslevel = compresslevel
        self._client = httpx.AsyncClient(
            base_url=self.endpoint,
            auth=AWS4Auth(
                access_id=access_key_id,
                secret_key=secret_access_key.get_secret_value(),
                region=region,
                service="s3",
            ),
            timeout=timeout,
            follow_redirects=False,
            trust_env=False,
        )

    def __repr__(self) -> str:
        return f"S3PageStore({self.endpoint}, s3://{self.bucket}/{self.prefix})"

    @property
    def where(self) -> str:
        return f"s3://{self.bucket}/{self.prefix} at {self.endpoint}"

    def _path(self, key: str) -> str:
        if not _KEY.fullmatch(key) or ".." in key.split("/") or key.startswith("/"):
            raise PageStoreError(f"page key {key!r} is not a page store key")
        return f"/{self.bucket}/{self.prefix}/{key}" if self.prefix else f"/{self.bucket}/{key}"

    async def _send(self, method: str, path: str, what: str, **kwargs: object) -> httpx.Response:
        try:
            response = await self._client.request(method, path, **kwargs)  # type: ignore[arg-type]
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise PageStoreError(f"{what}: S3 endpoint {self.endpoint} failed: {reason}") from exc
        if response.status_code >= 300 and not (method == "HEAD" and response.status_code == 404):
            raise self._refusal(response, what)
        return response

    def _refusal(self, response: httpx.Response, what: str) -> PageStoreError:
        found = _CODE.search(response.content)
        code = found[1].decode(errors="replace") if found else f"HTTP {response.status_code}"
        if code == "NoSuchBucket":
            return PageStoreError(
                f"{what}: the S3 bucket {self.bucket!r} does not exist at {self.endpoint} "
                "(Forager does not create buckets: create it, or fix FORAGER_PAGE_STORE)"
            )
        if code in _CREDENTIAL_ERRORS or response.status_code == 403:
            return PageStoreError(
                f"{what}: S3 refused the request ({code}): check FORAGER_S3_ACCESS_KEY_ID, "
                "FORAGER_S3_SECRET_ACCESS_KEY and FORAGER_S3_REGION, and the key's rights on "
                f"bucket {self.bucket!r}"
            )
        return PageStoreError(f"{what}: S3 answered {response.status_code} ({code})")

    async def put(self, url_hash: str, body: bytes) -> str:
        data = await asyncio.to_thread(
            gzip.compress, body, compresslevel=self.compresslevel, mtime=0
        )
        return await self.put_gzip(url_hash, data)

    def pack_root(self) -> Path | None:
        return None  # pages go over HTTP, from this process

    async def put_gzip(self, url_hash: str, data: bytes) -> str:
        key = page_key(url_hash)
        await self._send(
            "PUT",
            self._path(key),
            f"cannot store page {key}",
            content=data,
            headers={"content-type": "application/gzip"},
        )
        return key

    async def get(self, key: str) -> bytes:
        response = await self._send("GET", self._path(key), f"cannot read stored page {key}")
        try:
            return gzip.decompress(response.content)
        except (EOFError, gzip.BadGzipFile) as exc:
            raise PageStoreError(f"cannot read stored page {key}: {exc}") from exc

    async def put_blob(self, key: str, data: bytes, content_type: str) -> None:
        await self._send(
            "PUT",
            self._path(key),
            f"cannot store {key}",
            content=data,
            headers={"content-type": content_type},
        )

    async def get_blob(self, key: str) -> bytes:
        response = await self._send("GET", self._path(key), f"cannot read stored {key}")
        return response.content

    async def exists(self, key: str) -> bool:
        response = await self._send("HEAD", self._path(key), f"cannot look up page {key}")
        return response.status_code < 300

    async def delete(self, key: str) -> None:
        # S3 answers 204 for an object that is not there: deleting twice is harmless.
        await self._send("DELETE", self._path(key), f"cannot delete stored page {key}")

    async def check(self) -> None:
        params = {"list-type": "2", "max-keys": "1"}
        if self.prefix:
            params["prefix"] = self.prefix + "/"
        await self._send("GET", f"/{self.bucket}", f"page store {self.where}", params=params)

    async def aclose(self) -> None:
        await self._client.aclose()
