"""Strict request input: what no field of ours can hold is refused before any view sees it.

- JSON bodies: nesting deeper than ``MAX_JSON_DEPTH`` is 400 (100,000 nested lists once raised RecursionError, a
  500); a key given twice in one object is 400 (the last one silently won); a NUL (``\\u0000``) or a lone UTF-16
  surrogate (``\\ud800``) in any string is 422 naming the field (PostgreSQL's text cannot hold a NUL, and a lone
  surrogate cannot be encoded as UTF-8: both were 500s).
- Paths: a NUL or a lone surrogate in a path parameter is 404 (no such thing can exist); in a query parameter it is
  422 naming the parameter.

Every blueprint's ``@blp.arguments`` reads JSON through :class:`StrictParser`, which parses the body once with
these checks.
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

from flask import Response, request
from webargs import core
from webargs.flaskparser import FlaskParser

from app.errors import FieldError, ServiceError, ValidationFailed

MAX_JSON_DEPTH = 32
_SUSPECT = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")  # an escaped NUL or surrogate somewhere in the raw body
_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")  # after decoding, any surrogate left is a lone one


class BadJSON(ValueError):
    """The body is not JSON we accept (syntax, depth, a duplicate key): a 400 whose detail says why."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _v in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise BadJSON(f"the key {dup[:100]!r} is given twice in one object")
    return out


def bad_char_message(value: str) -> str:
    if "\x00" in value:
        return "must not contain NUL characters (\\u0000)"
    return "must not contain a lone UTF-16 surrogate (e.g. \\ud800): it is not a character"


def _walk(doc: Any, *, check_strings: bool) -> tuple[int, list[dict[str, str]]]:
    """The nesting depth of ``doc`` and, when asked, every string (key or value) holding a NUL or lone surrogate."""
    depth, errors = 0, []
    stack: list[tuple[Any, str, int]] = [(doc, "", 1)]
    while stack:
        node, path, level = stack.pop()
        if isinstance(node, dict):
            depth = max(depth, level)
            for key, value in node.items():
                sub = f"{path}.{key}" if path else str(key)
                if check_strings and _BAD_CHAR.search(key):
                    errors.append({"field": _printable(sub), "message": "key " + bad_char_message(key)})
                stack.append((value, sub, level + 1))
        elif isinstance(node, list):
            depth = max(depth, level)
            stack.extend((value, f"{path}[{i}]", level + 1) for i, value in enumerate(node))
        elif check_strings and isinstance(node, str) and _BAD_CHAR.search(node):
            errors.append({"field": _printable(path) or "body", "message": bad_char_message(node)})
    return depth, errors


def _printable(text: str) -> str:
    return _BAD_CHAR.sub(lambda m: f"\\u{ord(m.group()):04x}", text)[:300]


class BadChars(ValueError):
    def __init__(self, errors: list[dict[str, str]]) -> None:
        super().__init__("strings hold NUL or lone surrogates")
        self.errors = errors


def load_json(raw: bytes) -> Any:
    """Parse a request body: JSON whose objects have distinct keys, at most ``MAX_JSON_DEPTH`` deep, and whose
    strings hold no NUL and no lone surrogate. Raises :class:`BadJSON` or :class:`BadChars`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadJSON(f"the body is not UTF-8 (byte {exc.start})") from None
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise BadJSON(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise BadJSON(f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    # the walk is skipped for the usual body: too few brackets to be deep, no escaped NUL or surrogate
    deep = raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH
    suspect = _SUSPECT.search(raw) is not None
    if deep or suspect:
        depth, errors = _walk(doc, check_strings=suspect)
        if depth > MAX_JSON_DEPTH:
            raise BadJSON(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        if errors:
            raise BadChars(errors)
    return doc


class StrictParser(FlaskParser):
    """webargs' Flask parser, reading JSON bodies through :func:`load_json`."""

    def _raw_load_json(self, req: Any) -> Any:
        if not core.is_json(req.mimetype):
            return core.missing
        try:
            return load_json(req.get_data(cache=True))
        except BadChars as exc:
            self._abort(422, exc.errors)
        except BadJSON as exc:
            self._abort(400, [{"field": "body", "message": str(exc)}], str(exc))

    @staticmethod
    def _abort(status: int, errors: list[dict[str, str]], detail: str | None = None) -> NoReturn:
        fields = [FieldError(e["field"], e["message"]) for e in errors]
        if status == 422:
            raise ValidationFailed("the request has invalid characters; nothing was stored", fields)
        raise ServiceError(detail or "bad request body", fields, status, "Bad request")


def check_path_and_query() -> Response | None:
    """Before anything else: a NUL or lone surrogate in the path is 404, in a query parameter 422 naming it."""
    from app.api import problem

    if _BAD_CHAR.search(request.path):
        return problem(404, "Not found", "no resource has a NUL or a lone surrogate in its path")
    errors = [
        {"field": _printable(name), "message": bad_char_message(name + value)}
        for name, value in request.args.items(multi=True)
        if _BAD_CHAR.search(name) or _BAD_CHAR.search(value)
    ]
    if errors:
        return problem(422, "Validation failed", "a query parameter has invalid characters", errors)
    return None
