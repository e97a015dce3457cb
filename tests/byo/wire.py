"""A recording TCP proxy for the BYO wire check (loopback only, stdlib only).

It sits between a real plugin and the app's callback listener and keeps every byte of both
directions, so the driver can assert that no transcript or chat text crosses in clear. The
only change it makes is the request's `Host` header (the listener answers only to its own
`host:port`, like any DNS-rebinding-safe server behind a tunnel): request heads are parsed
just far enough to rewrite that line and to find each body's end (`Content-Length` or
chunked), so keep-alive connections keep working. Answers (the SSE stream included) are
passed through untouched, byte for byte, as they arrive.
"""
from __future__ import annotations

import socket
import threading
import time
from typing import Any


class RecordingProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1"):
        assert target_host.startswith("127."), "loopback only"
        self.target = (target_host, target_port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        # (monotonic time, "up" | "down", connection number, bytes)
        self.chunks: list[tuple[float, str, int, bytes]] = []
        self.conns = 0
        self.closed = False
        threading.Thread(target=self._accept, name="byo-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def retarget(self, port: int) -> None:
        """The app restarted on another callback port."""
        self.target = (self.target[0], port)

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    # -- captured data
    def captured(self, since: float = 0.0) -> bytes:
        """Every byte, each connection's direction as one contiguous stream (so a text split
        across two reads is still found), the streams separated by a NUL line."""
        streams: dict[tuple[int, str], list[bytes]] = {}
        with self.lock:
            for t, d, n, c in self.chunks:
                if t >= since:
                    streams.setdefault((n, d), []).append(c)
        return b"\n\0\n".join(b"".join(v) for _, v in sorted(streams.items()))

    def answers(self, since: float = 0.0) -> bytes:
        with self.lock:
            return b"".join(c for t, d, _, c in self.chunks if t >= since and d == "down")

    def requests(self, path_suffix: str, since: float = 0.0) -> list[tuple[str, Any]]:
        """Every `POST …<path_suffix>` the plugin sent, in order: (path, JSON body or None)."""
        import json
        import re

        head = re.compile(rb"POST (\S+) HTTP/1\.[01]\r\n(.*?)\r\n\r\n", re.S)
        out = []
        for stream in self.captured(since).split(b"\n\0\n"):
            for m in head.finditer(stream):
                path = m.group(1).decode("latin-1")
                if not path.split("?")[0].endswith(path_suffix):
                    continue
                n = re.search(rb"(?im)^content-length:\s*(\d+)", m.group(2))
                raw = stream[m.end(): m.end() + int(n.group(1))] if n else b""
                try:
                    out.append((path, json.loads(raw) if raw else None))
                except ValueError:
                    out.append((path, None))
        return out

    def total(self) -> int:
        with self.lock:
            return sum(len(c) for *_, c in self.chunks)

    # -- plumbing
    def _record(self, direction: str, n: int, data: bytes) -> None:
        with self.lock:
            self.chunks.append((time.monotonic(), direction, n, data))

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns += 1
                n = self.conns
            threading.Thread(target=self._serve, args=(client, n), daemon=True).start()

    def _serve(self, client: socket.socket, n: int) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=10)
            upstream.settimeout(None)
        except OSError:
            client.close()
            return
        threading.Thread(target=self._down, args=(upstream, client, n), daemon=True).start()
        try:
            self._up(client, upstream, n)
        except OSError:
            pass
        finally:
            for s in (client, upstream):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _down(self, upstream: socket.socket, client: socket.socket, n: int) -> None:
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                self._record("down", n, data)
                client.sendall(data)
        except OSError:
            pass
        finally:
            try:
                client.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def _up(self, client: socket.socket, upstream: socket.socket, n: int) -> None:
        buf = b""

        def need(k: int) -> bool:
            nonlocal buf
            while len(buf) < k:
                data = client.recv(65536)
                if not data:
                    return False
                buf += data
            return True

        def until(sep: bytes) -> int:
            nonlocal buf
            while sep not in buf:
                data = client.recv(65536)
                if not data:
                    return -1
                buf += data
            return buf.index(sep)

        while True:
            end = until(b"\r\n\r\n")
            if end < 0:
                return
            head, buf = buf[: end + 4], buf[end + 4:]
            lines = head.split(b"\r\n")
            out = [lines[0]]
            length, chunked = 0, False
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                key = name.strip().lower()
                if key == b"host":
                    line = b"Host: %s:%d" % (self.target[0].encode(), self.target[1])
                elif key == b"content-length":
                    length = int(value.strip() or b"0")
                elif key == b"transfer-encoding" and b"chunked" in value.lower():
                    chunked = True
                out.append(line)
            new_head = b"\r\n".join(out)
            self._record("up", n, new_head)
            upstream.sendall(new_head)
            if chunked:
                while True:
                    i = until(b"\r\n")
                    if i < 0:
                        return
                    size = int(buf[:i].split(b";")[0].strip() or b"0", 16)
                    total = i + 2 + size + 2
                    if not need(total):
                        return
                    part, buf = buf[:total], buf[total:]
                    self._record("up", n, part)
                    upstream.sendall(part)
                    if size == 0:
                        break
            elif length:
                if not need(length):
                    return
                body, buf = buf[:length], buf[length:]
                self._record("up", n, body)
                upstream.sendall(body)


def needles(text: str, pieces: bool = True) -> list[bytes]:
    """The forms a clear text could take on the wire: raw UTF-8, JSON-escaped (both ways), and
    (`pieces`) a 24-character piece of its middle (a text cut or re-wrapped still matches)."""
    import json

    forms = {text.encode(), json.dumps(text)[1:-1].encode(),
             json.dumps(text, ensure_ascii=False)[1:-1].encode()}
    if pieces and len(text) > 24:
        mid = len(text) // 2
        forms.add(text[mid - 12: mid + 12].encode())
    return sorted(forms)


def find_clear(captured: bytes, texts: list[str], pieces: bool = True) -> list[dict[str, Any]]:
    """Every clear text found in `captured`, with some context."""
    found = []
    for t in texts:
        for nd in needles(t, pieces):
            i = captured.find(nd)
            if i >= 0:
                found.append({"text": t, "form": nd.decode("utf-8", "replace"),
                              "context": captured[max(0, i - 80): i + len(nd) + 40].decode("utf-8", "replace")})
                break
    return found
