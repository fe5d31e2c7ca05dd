"""A TCP forwarder on 127.0.0.1 that a test can cut: a broker's ``zookeeper.connect`` points at it
so that the broker's ZooKeeper connection can be killed while the broker keeps running.

:meth:`CutProxy.cut` closes every forwarded connection and, until :meth:`CutProxy.restore`, closes
each new one as soon as it is accepted (the client sees its connection lost, retries, and ZooKeeper
expires its session once ``zookeeper.session.timeout.ms`` passes without it).
"""

from __future__ import annotations

import contextlib
import socket
import threading

from .zookeeper_support import _free_port


class CutProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = _free_port()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept_loop, name=f"cut-proxy-{self.port}", daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> CutProxy:
        self._thread.start()
        return self

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                refused = self._cut or self._closed
            if refused:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                self._drop(s)

    def _drop(self, s: socket.socket) -> None:
        with self._lock:
            self._open.discard(s)
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()

    def cut(self) -> None:
        """Kill the forwarded connections and refuse new ones."""
        with self._lock:
            self._cut = True
            victims = list(self._open)
        for s in victims:
            self._drop(s)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()
        self._thread.join(5)

    def __enter__(self) -> CutProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
