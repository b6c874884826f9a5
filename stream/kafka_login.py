"""Whether a Kafka broker takes the configured SASL/PLAIN login, asked in two requests of its own.

A broker answers a refused login with its reason (``Authentication failed: Invalid username or
password``) and closes the connection; kafka-python loses that answer in the close and retries
until its timeout, so a wrong password looked like a broker that never answered. Here the two
requests of the login (SaslHandshake v1, SaslAuthenticate v0, both with the classic header) are
written by hand and the broker's answer read back, before any client is built.
"""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

_SASL_HANDSHAKE, _SASL_AUTHENTICATE = 17, 36
_CLIENT_ID = b"lakecluster"


def refusal(server: str, kwargs: dict[str, Any], timeout_s: float) -> str | None:
    """The broker's reason for refusing the PLAIN login in ``kwargs`` (kafka-python's arguments);
    None when it takes the login, when no PLAIN login is configured, or when the exchange fails
    for another reason (the client's own attempt then reports it)."""
    if kwargs.get("sasl_mechanism") != "PLAIN" or kwargs.get("sasl_plain_username") is None:
        return None
    if kwargs.get("security_protocol") not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return None
    host, _, port = server.rpartition(":")
    try:
        with _connect(host.strip("[]"), int(port), kwargs, timeout_s) as sock:
            _request(sock, _SASL_HANDSHAKE, 1, _string(b"PLAIN"))
            if struct.unpack(">h", _response(sock)[:2])[0] != 0:
                return None  # the mechanism itself is refused: the client's error says so
            login = b"\0" + str(kwargs["sasl_plain_username"]).encode() + b"\0"
            login += str(kwargs.get("sasl_plain_password") or "").encode()
            _request(sock, _SASL_AUTHENTICATE, 0, struct.pack(">i", len(login)) + login)
            body = _response(sock)
    except (OSError, ValueError, struct.error):
        return None
    code, length = struct.unpack(">hh", body[:4])
    if code == 0:
        return None
    return body[4 : 4 + length].decode(errors="replace") if length > 0 else f"error code {code}"


def _connect(host: str, port: int, kwargs: dict[str, Any], timeout_s: float) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout_s)
    if kwargs["security_protocol"] != "SASL_SSL":
        return sock
    context = ssl.create_default_context(cafile=kwargs.get("ssl_cafile"))
    if kwargs.get("ssl_check_hostname") is False:
        context.check_hostname = False
    return context.wrap_socket(sock, server_hostname=host)


def _string(value: bytes) -> bytes:
    return struct.pack(">h", len(value)) + value


def _request(sock: socket.socket, api_key: int, version: int, body: bytes) -> None:
    message = struct.pack(">hhi", api_key, version, 1) + _string(_CLIENT_ID) + body
    sock.sendall(struct.pack(">i", len(message)) + message)


def _response(sock: socket.socket) -> bytes:
    """A response's body, after its size and correlation id."""
    size = struct.unpack(">i", _read(sock, 4))[0]
    return _read(sock, size)[4:]


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data
