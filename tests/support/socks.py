"""Loopback servers for proxy tests beside ``TestProxy``: a SOCKS5 proxy and a TLS front.

``TestSocksProxy`` speaks SOCKS5 (RFC 1928) with optional username/password auth (RFC 1929),
``CONNECT`` only, loopback targets only::

    with TestSocksProxy(username="u", password="p") as socks:
        httpx.get(site.url("/product/1"), proxy=socks.url)
        assert socks.requests == [f"127.0.0.1:{site.port}"]

``TlsFront`` terminates TLS on its own port and relays the plain bytes to a loopback port —
in front of the test site it makes an HTTPS site, in front of ``TestProxy`` an ``https://``
proxy. ``make_certificates`` writes a throwaway CA and a ``127.0.0.1`` certificate it signed.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
import struct
from pathlib import Path
from urllib.parse import quote

from tests.support.proxy import LoopbackServer, _is_loopback


class TestSocksProxy(LoopbackServer):
    """SOCKS5, CONNECT only; with ``username`` set, only that user/password gets through."""

    __test__ = False
    name = "test-socks5"

    def __init__(
        self,
        username: str | None = None,
        password: str | None = None,
        *,
        reset: bool = False,
        ports: dict[int, int] | None = None,
    ) -> None:
        super().__init__()
        self.username = username
        self.password = password
        self.reset = reset  # True: accept the tunnel, then reset the connection (an RST)
        # Tunnels to these ports go to those: a site only this proxy can reach.
        self.ports = ports or {}
        self.requests: list[str] = []  # "host:port" of every tunnel opened
        self.rejected = 0

    @property
    def url(self) -> str:
        auth = ""
        if self.username is not None:
            auth = f"{quote(self.username, safe='')}:{quote(self.password or '', safe='')}@"
        return f"socks5://{auth}127.0.0.1:{self.port}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        version, count = await reader.readexactly(2)
        methods = await reader.readexactly(count)
        wanted = 0x02 if self.username is not None else 0x00
        if version != 5 or wanted not in methods:
            self.rejected += 1
            writer.write(b"\x05\xff")
            return
        writer.write(bytes([5, wanted]))
        if wanted == 0x02:
            _, ulen = await reader.readexactly(2)
            user = (await reader.readexactly(ulen)).decode()
            (plen,) = await reader.readexactly(1)
            password = (await reader.readexactly(plen)).decode()
            if (user, password) != (self.username, self.password or ""):
                self.rejected += 1
                writer.write(b"\x01\x01")
                return
            writer.write(b"\x01\x00")
        _, command, _, kind = await reader.readexactly(4)
        if kind == 1:
            host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
        elif kind == 4:
            host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
        elif kind == 3:
            (length,) = await reader.readexactly(1)
            host = (await reader.readexactly(length)).decode()
        else:
            return
        (port,) = struct.unpack("!H", await reader.readexactly(2))
        if command != 1 or not _is_loopback(host):
            self.rejected += 1
            writer.write(b"\x05\x02\x00\x01" + bytes(6))  # not allowed by ruleset
            return
        self.requests.append(f"{host}:{port}")
        writer.write(b"\x05\x00\x00\x01" + bytes(6))
        await writer.drain()
        if self.reset:  # what a site dropping this exit IP looks like: the request, then RST
            await reader.read(1)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return
        await self.relay(reader, writer, host, self.ports.get(port, port))


class TlsFront(LoopbackServer):
    """TLS on ``port``, relayed as plain bytes to ``127.0.0.1:target_port``."""

    __test__ = False
    name = "test-tls-front"

    def __init__(self, target_port: int, cert_file: Path, key_file: Path) -> None:
        super().__init__()
        self.target_port = target_port
        self.ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ssl_context.load_cert_chain(cert_file, key_file)
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await self.relay(reader, writer, "127.0.0.1", self.target_port)


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) in PEM, the server one for 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Forager test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert_file, key_file = (directory / n for n in ("ca.pem", "cert.pem", "key.pem"))
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_file, cert_file, key_file
