"""A TCP proxy on 127.0.0.1 in front of a real server, that fails on command.

``fail_next(n, how)`` drops every open connection and makes the next ``n`` connections fail:
``"reset"`` closes them at once (a connection reset), ``"503"`` reads the request head and
answers S3's ``503 SlowDown``. After that, connections are forwarded byte for byte again.
"""

from __future__ import annotations

import socket
import struct
import threading

_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
_RESPONSE_503 = (
    b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
    + f"Content-Length: {len(_SLOW_DOWN)}\r\nConnection: close\r\n\r\n".encode()
    + _SLOW_DOWN
)


class FlakyProxy:
    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.lock = threading.Lock()
        self.failures: list[str] = []  # what is left to do to the next connections
        self.failed = {"reset": 0, "503": 0}
        self.forwarded = 0
        self.open: set[socket.socket] = set()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def fail_next(self, count: int, how: str) -> None:
        assert how in self.failed
        with self.lock:
            self.failures += [how] * count
            for sock in self.open:  # pooled keep-alive connections must reconnect
                _drop(sock)
            self.open.clear()

    def pending_failures(self) -> int:
        with self.lock:
            return len(self.failures)

    def close(self) -> None:
        self.closed = True
        self.server.close()
        with self.lock:
            for sock in self.open:
                _drop(sock)

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            with self.lock:
                how = self.failures.pop(0) if self.failures else None
                if how:
                    self.failed[how] += 1
            threading.Thread(target=self._serve, args=(client, how), daemon=True).start()

    def _serve(self, client: socket.socket, how: str | None) -> None:
        if how == "reset":
            _drop(client)
            return
        if how == "503":
            client.settimeout(5)
            head = b""
            try:
                while b"\r\n\r\n" not in head:
                    chunk = client.recv(65536)
                    if not chunk:
                        break
                    head += chunk
                client.sendall(_RESPONSE_503)
            except OSError:
                pass
            client.close()
            return
        try:
            upstream = socket.create_connection(self.target)
        except OSError:
            _drop(client)
            return
        with self.lock:
            self.forwarded += 1
            self.open.update((client, upstream))
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Forward one direction; at its end pass the end on (the sockets are closed by the proxy)."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        _drop(source)
        _drop(sink)


def _drop(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0), as a network failure would."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
