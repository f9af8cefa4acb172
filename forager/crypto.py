"""Encryption of secrets at rest (proxy passwords) with a Fernet key kept outside the database."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from forager.config import Settings
from forager.errors import ConfigError

log = logging.getLogger(__name__)


def _load_key(settings: Settings) -> bytes:
    if settings.secret_key is not None:
        return settings.secret_key.get_secret_value().encode()
    path: Path = settings.data_dir / "secret.key"
    if path.exists():
        return path.read_bytes().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    key = Fernet.generate_key()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key)
    log.warning(
        "FORAGER_SECRET_KEY is not set: generated %s; back it up, encrypted proxy "
        "passwords cannot be read without it",
        path,
    )
    return key


def derive_key(settings: Settings, purpose: str) -> bytes:
    """A key for ``purpose`` (e.g. signing sessions) derived from the secret key."""
    return hashlib.sha256(b"forager:" + purpose.encode() + b":" + _load_key(settings)).digest()


class SecretBox:
    """Encrypts and decrypts short secrets; ciphertext is what the database stores.

    The key is loaded (or generated) on first use, so processes that never touch a
    secret never create one.
    """

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._fernet: Fernet | None = None

    def _cipher(self) -> Fernet:
        if self._fernet is None:
            try:
                self._fernet = Fernet(_load_key(self._settings))
            except (ValueError, TypeError) as exc:
                raise ConfigError(
                    "FORAGER_SECRET_KEY must be a Fernet key (urlsafe base64 of 32 bytes)"
                ) from exc
        return self._fernet

    def encrypt(self, plain: str) -> str:
        return self._cipher().encrypt(plain.encode()).decode()

    def decrypt(self, token: str) -> str:
        try:
            return self._cipher().decrypt(token.encode()).decode()
        except InvalidToken as exc:
            raise ConfigError(
                "a stored secret cannot be decrypted: FORAGER_SECRET_KEY differs from the "
                "key it was encrypted with"
            ) from exc
