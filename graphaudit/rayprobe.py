"""Whether an address is a Ray cluster, in seconds: a TCP connection and an HTTP/2 exchange (the protocol of gRPC,
which Ray's GCS and client server speak). Ray's own ``ray.init`` retries an unreachable cluster, or a port that is
not Ray, for minutes, with Ctrl-C unheard."""

from __future__ import annotations

import os
import socket
import time

from .errors import GraphAuditError

__all__ = ["check_reachable"]


#: HTTP/2's client connection preface (RFC 9113 §3.4) and an empty SETTINGS frame (§6.5): gRPC, the protocol of
#: Ray's GCS and of its client server, answers with a SETTINGS frame of its own (type 4 on stream 0).
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """``host:port`` (``ray://host:port`` too) accepts a TCP connection and speaks gRPC (HTTP/2, as Ray's GCS and
    client server do) within ``timeout`` seconds, else one line: Ray itself retries an unreachable cluster or a port
    that is not Ray for minutes. A cluster with TLS (``RAY_USE_TLS``) is only checked for the connection."""
    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise GraphAuditError(f"--ray {address}: give host:port (e.g. head-node:6379 or ray://head-node:10001), "
                              "'auto' or 'local'")
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except OSError as e:
        raise GraphAuditError(f"--ray {address}: cannot reach the cluster ({e.strerror or type(e).__name__})") from e
    with conn:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return
        try:
            conn.sendall(_H2_PREFACE)
            head = _read(conn, 9)
            if len(head) == 9 and head[3] == 4 and head[5:9] == bytes(4):
                if _answers_ping(conn, head, timeout):
                    return
                raise GraphAuditError(f"--ray {address}: not a Ray cluster (an HTTP/2 server that does not answer a "
                                      f"PING within {timeout:g} s; give the head node's GCS port, 6379 by default, or "
                                      "ray://head:10001)")
        except OSError as e:
            problem = (f"no answer to a gRPC handshake within {timeout:g} s" if isinstance(e, TimeoutError)
                       else f"the connection failed during a gRPC handshake: {e.strerror or type(e).__name__}")
            raise GraphAuditError(f"--ray {address}: not a Ray cluster ({problem}; give the head node's GCS port, "
                                  "6379 by default, or ray://head:10001)") from e
    http = head.startswith(b"HTTP/") or head.lstrip().startswith(b"<")
    what = "an HTTP server" if http else (
        "the connection was closed" if not head else "the answer is not gRPC")
    hint = " (Ray's dashboard serves HTTP on 8265)" if http else ""
    raise GraphAuditError(f"--ray {address}: not a Ray cluster ({what}{hint}; give the head node's GCS port, 6379 by "
                          "default, or ray://head:10001)")


def _answers_ping(conn: socket.socket, settings: bytes, timeout: float) -> bool:
    """After the server's SETTINGS frame header ``settings``: acknowledge it and send a PING, which every HTTP/2
    endpoint must answer with a PING ACK (RFC 9113 section 6.7); True on that answer (or a GOAWAY: an HTTP/2 stack
    that processes frames), False when none comes within ``timeout`` seconds (a port that opens HTTP/2 and then
    stays silent: ray.init waited 13 minutes on one, Ctrl-C unheard)."""
    deadline = time.monotonic() + timeout
    _read(conn, int.from_bytes(settings[:3], "big"))  # the SETTINGS payload
    conn.sendall(bytes([0, 0, 0, 4, 1, 0, 0, 0, 0]) + bytes([0, 0, 8, 6, 0, 0, 0, 0, 0]) + b"graphaud")
    while (left := deadline - time.monotonic()) > 0:
        conn.settimeout(left)
        try:
            head = _read(conn, 9)
        except TimeoutError:
            return False
        if len(head) < 9:
            return False  # closed
        body = _read(conn, int.from_bytes(head[:3], "big"))
        if head[3] == 7 or (head[3] == 6 and head[4] & 1 and body == b"graphaud"):  # GOAWAY, or our PING's ACK
            return True
    return False


def _read(conn: socket.socket, n: int) -> bytes:
    """Up to ``n`` bytes from ``conn`` (fewer when the peer closes)."""
    out = b""
    while len(out) < n:
        block = conn.recv(n - len(out))
        if not block:
            break
        out += block
    return out
