"""A loopback TCP proxy that a test can stop and restart: the way the reliability tests make
Postgres or Redis unreachable for the processes behind it without touching the shared servers.

``stop()`` closes the listening socket and every relayed connection (clients see a reset or
EOF, new connections are refused); ``start()`` listens again on the same port.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.fixtures.stack import free_port


class TcpProxy:
    """Relays ``127.0.0.1:<port>`` to ``target``; one thread per direction per connection."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.accepted = 0

    @property
    def running(self) -> bool:
        return self._listener is not None

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True,
                         name=f"proxy-{self.port}").start()

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            conns, self._conns = self._conns, set()
        for s in conns:
            _close(s)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._listener is not listener:  # stopped meanwhile
                    _close(client)
                    _close(upstream)
                    return
                self._conns.update((client, upstream))
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            _close(src)
            _close(dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
