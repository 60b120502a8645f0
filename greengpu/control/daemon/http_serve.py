"""A small HTTP/1.0 server with bounds: a real listen backlog, read timeouts and a fixed pool of workers.

`http.server.ThreadingHTTPServer` gives every connection a thread from the moment it is accepted and
reads it without a timeout, with a listen backlog of 5: 200 half-sent requests held 200 threads for over
a minute, and 200 concurrent scrapes saw client timeouts. Here one thread accepts every connection and
reads its request head without blocking (selectors); only a connection whose head has arrived whole is
handed to a worker of a fixed pool, so an idle or half-sent connection costs a buffer, never a thread,
and is closed when its head has not come within `read_timeout_s`. The workers run an ordinary
`BaseHTTPRequestHandler` (the head already read is put back in front of the socket), with the same
timeout on the body and on the answer, and a client that hangs up is a debug line, not a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import BinaryIO

log = logging.getLogger("greengpu.http")

LISTEN_BACKLOG = 1024
"""Connections the kernel queues before they are accepted (capped by net.core.somaxconn)."""
MAX_HEAD_BYTES = 64 * 1024
"""Longest request line and headers together; a longer head is answered 431 and closed."""
MAX_WAITING = 2048
"""Connections accepted whose request head has not come whole yet; beyond it the one waiting longest goes."""


PeerAddress = tuple[str, int] | tuple[str, int, int, int]
"""A client's address as `accept` gives it: (host, port) for IPv4, four fields for IPv6."""


@dataclass
class _Waiting:
    address: PeerAddress
    deadline_s: float
    head: bytearray = field(default_factory=bytearray)


class _Prefixed:
    """A reader that yields `head` (already read from the socket) and then the socket's own stream."""

    closed = False

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head = memoryview(head)
        self._at = 0
        self._rest = rest

    def readline(self, limit: int = -1) -> bytes:
        left = self._head[self._at:]
        if left.nbytes:
            end = bytes(left).find(b"\n")
            take = left.nbytes if end < 0 else end + 1
            if limit >= 0:
                take = min(take, limit)
            line = bytes(left[:take])
            self._at += take
            if line.endswith(b"\n") or (limit >= 0 and len(line) >= limit):
                return line
            return line + self._rest.readline(limit - len(line) if limit >= 0 else -1)
        return self._rest.readline(limit)

    def read(self, size: int = -1) -> bytes:
        left = self._head[self._at:]
        take = left.nbytes if size < 0 else min(size, left.nbytes)
        data = bytes(left[:take])
        self._at += take
        if size < 0:
            return data + self._rest.read()
        return data + (self._rest.read(size - take) if size > take else b"")

    def close(self) -> None:
        self.closed = True
        self._rest.close()


class _Writer:
    """`wfile` over a blocking socket: every write sent whole (sendall), as socketserver's own writer."""

    closed = False

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def write(self, data: bytes) -> int:
        self._sock.sendall(data)
        return len(data)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True


def send_reply(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str,
               headers: dict[str, str] | None = None) -> None:
    """Answer a request whole: status, content type and length, `headers`, then `body`."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


class BoundedHandler(BaseHTTPRequestHandler):
    """A request handler for `BoundedHTTPServer`: its `request` is (socket, head already read)."""

    def setup(self) -> None:
        sock, head = self.request
        self.connection = sock
        self.rfile = _Prefixed(head, sock.makefile("rb"))  # type: ignore[assignment]
        self.wfile = _Writer(sock)  # type: ignore[assignment]

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - requests are logged where they matter
        return


class BoundedHTTPServer:
    """Serve `handler` (a `BoundedHandler`) on host:port from one dispatching thread and `workers` threads.

    Binds at once (an address in use raises OSError here); `start()` serves, `stop()` ends it. Threads in
    use: 1 + `workers`, whatever the clients do."""

    def __init__(self, host: str, port: int, handler: type[BoundedHandler], *, workers: int = 8,
                 read_timeout_s: float = 10.0, backlog: int = LISTEN_BACKLOG, name: str = "greengpu-http") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, port))
            self._listener.listen(backlog)
        except OSError:
            self._listener.close()
            raise
        self._listener.setblocking(False)
        self.handler = handler
        self.read_timeout_s = read_timeout_s
        self.workers = workers
        self.server_address = self._listener.getsockname()
        self.dropped_idle = 0
        """Connections closed because their request head did not come within the read timeout."""
        self._waiting: dict[socket.socket, _Waiting] = {}
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=f"{name}-worker")
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> BoundedHTTPServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close every connection; safe whether or not `start()` was called."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for sock in list(self._waiting):
            self._drop(sock)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()

    # --- the dispatching thread ------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            for key, _ in self._selector.select(timeout=0.5):
                if key.data is None:
                    self._accept()
                elif key.data == "wake":
                    continue
                else:
                    self._read(key.fileobj, key.data)  # type: ignore[arg-type]
            self._expire(time.monotonic())

    def _accept(self) -> None:
        for _ in range(64):  # a burst at a time, so that the waiting ones are read too
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # out of file descriptors: the kernel keeps the rest queued
                log.warning("HTTP: cannot accept a connection: %s", error)
                return
            if len(self._waiting) >= MAX_WAITING:
                self.dropped_idle += 1
                self._drop(next(iter(self._waiting)))  # the one waiting longest (dicts keep order)
            sock.setblocking(False)
            waiting = _Waiting(address, time.monotonic() + self.read_timeout_s)
            self._waiting[sock] = waiting
            self._selector.register(sock, selectors.EVENT_READ, waiting)

    def _read(self, sock: socket.socket, waiting: _Waiting) -> None:
        try:
            chunk = sock.recv(16384)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(sock)
            return
        if not chunk:
            self._drop(sock)
            return
        waiting.head += chunk
        if b"\r\n\r\n" in waiting.head or b"\n\n" in waiting.head:
            self._selector.unregister(sock)
            del self._waiting[sock]
            sock.setblocking(True)
            sock.settimeout(self.read_timeout_s)
            self._pool.submit(self._serve, sock, waiting.address, bytes(waiting.head))
        elif len(waiting.head) > MAX_HEAD_BYTES:
            with contextlib.suppress(OSError):
                sock.send(b"HTTP/1.0 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n\r\n")
            self._drop(sock)

    def _expire(self, now_s: float) -> None:
        for sock, waiting in list(self._waiting.items()):
            if waiting.deadline_s > now_s:
                break  # in order of arrival, so of deadline
            self.dropped_idle += 1
            self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        self._waiting.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        sock.close()

    # --- a worker --------------------------------------------------------------------------------

    def _serve(self, sock: socket.socket, address: PeerAddress, head: bytes) -> None:
        try:
            self.handler((sock, head), address, self)  # type: ignore[arg-type]
        except OSError as error:  # the client hung up or stalled: its business, not a traceback
            log.debug("HTTP: connection from %s ended: %s", address[0], error)
        except Exception as error:  # noqa: BLE001 - one request's bug must not take a worker down
            log.error("HTTP: request from %s failed: %s: %s", address[0], type(error).__name__, error)
        finally:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
