"""Where a client connects and with what credentials: the server URL, namespace, API
key and TLS files, from arguments or the environment variables the CLI reads."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import grpc

from railyard.errors import ConfigurationError

DEFAULT_SERVER = "http://127.0.0.1:7400"
DEFAULT_NAMESPACE = "default"
# The server's gRPC message bound (railyard_proto::MAX_MESSAGE_BYTES).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
MAX_KEY_FILE_BYTES = 4096
MAX_PEM_BYTES = 1 << 20


class ApiKey:
    """An API key, sent as ``authorization: Bearer <key>``. Its repr never shows it."""

    __slots__ = ("_key",)

    def __init__(self, key: str) -> None:
        key = key.strip()
        if not key:
            raise ConfigurationError("invalid API key: it is empty")
        if not all(33 <= ord(c) <= 126 for c in key):
            raise ConfigurationError("invalid API key: it may hold only printable ASCII")
        self._key = key

    def expose(self) -> str:
        """The key itself, to send."""
        return self._key

    def __repr__(self) -> str:
        return "ApiKey(<redacted>)"

    __str__ = __repr__


def read_bounded_file(what: str, path: str | os.PathLike[str], limit: int) -> bytes:
    """A regular file of at most ``limit`` bytes, opened without blocking (a FIFO is
    refused, not waited on); errors name ``what`` and the path."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise ConfigurationError(f"{what} {p}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ConfigurationError(f"{what} {p}: not a regular file")
        if st.st_size > limit:
            raise ConfigurationError(f"{what} {p}: {st.st_size} bytes, more than {limit}")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ConfigurationError(f"{what} {p}: more than {limit} bytes")
    return data


def read_api_key_file(path: str | os.PathLike[str]) -> ApiKey:
    """The key in a file: its first line (the file at most 4 KiB)."""
    data = read_bounded_file("api_key_file", path, MAX_KEY_FILE_BYTES)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ConfigurationError(f"api_key_file {path}: not UTF-8 text") from None
    first = text.splitlines()[0].strip() if text.strip() else ""
    if not first:
        raise ConfigurationError(f"api_key_file {path}: the file is empty")
    return ApiKey(first)


def _pem(what: str, path: str | os.PathLike[str] | None) -> bytes | None:
    if path is None:
        return None
    data = read_bounded_file(what, path, MAX_PEM_BYTES)
    if b"-----BEGIN " not in data:
        raise ConfigurationError(f"{what} {path}: no PEM block in it")
    return data


@dataclass(frozen=True)
class Target:
    """A parsed server URL."""

    url: str
    host_port: str
    tls: bool


def parse_server(url: str) -> Target:
    """``http://host:port`` or ``https://host:port`` (ports default to 80 and 443)."""
    bad = f"invalid server address {url!r}: expected a URL such as {DEFAULT_SERVER}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(bad)
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ConfigurationError(f"{bad} (no path, query or credentials)")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigurationError(bad) from None
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    return Target(url=url, host_port=f"{host}:{port}", tls=parts.scheme == "https")


@dataclass(frozen=True)
class Settings:
    """What a client connects with, resolved from arguments and the environment."""

    target: Target
    namespace: str
    api_key: ApiKey | None
    credentials: grpc.ChannelCredentials | None
    identity: str


def default_identity() -> str:
    return f"railyard-python@{socket.gethostname() or 'localhost'}"


def resolve(
    server: str | None,
    namespace: str | None,
    api_key: str | None,
    api_key_file: str | os.PathLike[str] | None,
    tls_ca: str | os.PathLike[str] | None,
    tls_cert: str | os.PathLike[str] | None,
    tls_key: str | os.PathLike[str] | None,
    identity: str | None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Arguments first, then ``RAILYARD_SERVER``, ``RAILYARD_NAMESPACE``,
    ``RAILYARD_API_KEY_FILE`` (wins over ``RAILYARD_API_KEY``), ``RAILYARD_TLS_CA``,
    ``RAILYARD_TLS_CLIENT_CERT`` and ``RAILYARD_TLS_CLIENT_KEY``."""
    env = os.environ if env is None else env
    target = parse_server(server or env.get("RAILYARD_SERVER") or DEFAULT_SERVER)
    ns = namespace or env.get("RAILYARD_NAMESPACE") or DEFAULT_NAMESPACE
    key: ApiKey | None
    if api_key is not None:
        key = ApiKey(api_key)
    elif api_key_file is not None:
        key = read_api_key_file(api_key_file)
    elif env.get("RAILYARD_API_KEY_FILE"):
        key = read_api_key_file(env["RAILYARD_API_KEY_FILE"])
    elif env.get("RAILYARD_API_KEY"):
        key = ApiKey(env["RAILYARD_API_KEY"])
    else:
        key = None
    ca = tls_ca or env.get("RAILYARD_TLS_CA") or None
    cert = tls_cert or env.get("RAILYARD_TLS_CLIENT_CERT") or None
    pkey = tls_key or env.get("RAILYARD_TLS_CLIENT_KEY") or None
    credentials = None
    if target.tls:
        if (cert is None) != (pkey is None):
            raise ConfigurationError("TLS: tls_cert and tls_key go together (mutual TLS)")
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_pem("tls_ca", ca),
            private_key=_pem("tls_key", pkey),
            certificate_chain=_pem("tls_cert", cert),
        )
    elif ca or cert or pkey:
        raise ConfigurationError(
            f"invalid server address {target.url!r}: TLS settings were given: use an https:// URL"
        )
    return Settings(target, ns, key, credentials, identity or default_identity())


CHANNEL_OPTIONS: list[tuple[str, int | str]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.enable_retries", 0),
]


def aio_channel(settings: Settings) -> grpc.aio.Channel:
    """A channel (it connects lazily: an unreachable server shows on the first call)."""
    if settings.credentials is not None:
        return grpc.aio.secure_channel(
            settings.target.host_port, settings.credentials, options=CHANNEL_OPTIONS
        )
    return grpc.aio.insecure_channel(settings.target.host_port, options=CHANNEL_OPTIONS)
