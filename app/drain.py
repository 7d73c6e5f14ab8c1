"""Read the rest of a request body the application did not read, so that an early refusal reaches the client.

gunicorn's sync workers close the connection after every answer. A request refused before its body is read (429
from the cost budget, 401 or 403 before any parsing: app/costs.py, app/api/access.py) leaves body bytes in the
socket, and closing a socket that still holds unread bytes makes the kernel send a reset instead of a normal close.
nginx, still sending the body or not yet done reading the answer, then reports 502 instead of the 429 (about 1 in
180 refused requests of an invalid-batch flood; docs/hostile-load.md). Reading what is left, up to the body limit,
lets the close be a normal one. The bytes are read and dropped, never parsed or kept: a refused body costs its copy
out of the socket (about a millisecond for the 3.7 MB of a 10,000-job batch), not its validation.

Only a body with a ``Content-Length`` no larger than ``GRIDSHIFT_MAX_CONTENT_LENGTH`` is drained: a larger one is
refused with 413 (nginx refuses it before gunicorn sees it), and reading it would be the attacker's choice of work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from flask import Flask

from app.config import Settings

#: Largest single read while draining [bytes]: gunicorn asks the socket for up to this much at once.
CHUNK = 1 << 20


class CountingInput:
    """``wsgi.input`` that counts what the application reads, and can read and drop the rest of the body."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.consumed = 0

    def read(self, size: int | None = -1) -> bytes:
        data = self._stream.read() if size is None or size < 0 else self._stream.read(size)
        self.consumed += len(data)
        return bytes(data)

    def readinto(self, buffer: Any) -> int:
        if hasattr(self._stream, "readinto"):
            n = int(self._stream.readinto(buffer) or 0)
        else:
            data = self._stream.read(len(buffer))
            n = len(data)
            buffer[:n] = data
        self.consumed += n
        return n

    def readline(self, size: int | None = -1) -> bytes:
        line = self._stream.readline() if size is None or size < 0 else self._stream.readline(size)
        self.consumed += len(line)
        return bytes(line)

    def readlines(self, hint: int = -1) -> list[bytes]:
        lines = list(self._stream.readlines(hint))
        self.consumed += sum(len(line) for line in lines)
        return lines

    def __iter__(self) -> Iterator[bytes]:
        for line in self._stream:
            self.consumed += len(line)
            yield line

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def drain(self, length: int) -> int:
        """Read and drop what is left of a body of ``length`` bytes; how many bytes that was."""
        dropped = 0
        while self.consumed < length:
            data = self._stream.read(min(CHUNK, length - self.consumed))
            if not data:  # the client stopped sending: nothing left to read
                break
            self.consumed += len(data)
            dropped += len(data)
        return dropped


class DrainBody:
    """WSGI middleware: after the application has answered, read the unread rest of a body of known length."""

    def __init__(self, wsgi_app: Callable[..., Iterable[bytes]], limit_bytes: int) -> None:
        self.wsgi_app = wsgi_app
        self.limit_bytes = limit_bytes

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length <= 0 or length > self.limit_bytes or "wsgi.input" not in environ:
            return self.wsgi_app(environ, start_response)
        body = CountingInput(environ["wsgi.input"])
        environ["wsgi.input"] = body
        try:
            return self.wsgi_app(environ, start_response)
        finally:
            # the client went away mid-body (each server says so in its own way): nobody is left to answer
            with contextlib.suppress(Exception):
                body.drain(length)


def init_app(app: Flask, settings: Settings) -> None:
    app.wsgi_app = DrainBody(app.wsgi_app, settings.max_content_length)  # type: ignore[method-assign]
