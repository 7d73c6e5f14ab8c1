"""Gridshift service: ``create_app`` wires settings, database, REST API, dashboard and Celery."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

from flask import Flask

from app.config import Settings


def create_app(settings: Settings | None = None) -> Flask:
    """Application factory (Flask's own pattern); every subsystem attaches through ``init_app``."""
    settings = settings or Settings.from_env()
    app = Flask(__name__, static_folder=None)
    app.config.update(
        SECRET_KEY=settings.secret_key or _local_secret(settings.var_dir),
        MAX_CONTENT_LENGTH=settings.max_content_length,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.session_cookie_secure,
        TESTING=settings.testing,
        GRIDSHIFT_SETTINGS=settings,
    )
    logging.getLogger("cmdstanpy").setLevel(logging.WARNING)

    from app import api, celery_app, costs, drain, extensions, logs, metrics, security, web

    logs.init_app(app, settings)
    extensions.init_app(app, settings)
    api.init_app(app)
    security.init_app(app)
    costs.init_app(app)
    metrics.init_app(app, settings)
    web.init_app(app)
    celery_app.celery_init_app(app, settings)
    drain.init_app(app, settings)  # a body refused unread is read and dropped, so the close is clean (no 502)
    return app


def _local_secret(var_dir: Path) -> str:
    """A per-installation secret for the embedded default, kept in var/ (never in the repository)."""
    var_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # never readable by jobs (docs/security.md)
    path = var_dir / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path.read_text().strip()
