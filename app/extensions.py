"""Per-app database handle and the request-scoped session."""

from __future__ import annotations

from dataclasses import dataclass

from flask import Flask, current_app, g, has_request_context, request
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db import make_engine, make_session_factory, read_engine
from app.services.auth import PrincipalCache


@dataclass
class Gridshift:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    principals: PrincipalCache
    read_sessions: sessionmaker[Session]


def init_app(app: Flask, settings: Settings) -> None:
    engine = make_engine(settings)
    app.extensions["gridshift"] = Gridshift(
        settings,
        engine,
        make_session_factory(engine),
        PrincipalCache(settings.auth_cache_s),
        make_session_factory(read_engine(engine)),
    )

    @app.teardown_appcontext
    def _close_session(exc: BaseException | None) -> None:
        session: Session | None = g.pop("db_session", None)
        if session is not None:
            if exc is not None:
                session.rollback()
            session.close()


def state() -> Gridshift:
    return current_app.extensions["gridshift"]  # type: ignore[no-any-return]


def settings() -> Settings:
    return state().settings


def db_session() -> Session:
    """The session of the current request or task; views commit through services.

    API reads (GET and HEAD) get a session whose statements each commit on their own (see ``app.db.read_engine``).
    """
    if "db_session" not in g:
        st = state()
        g.db_session = st.read_sessions() if _is_api_read() else st.sessions()
    return g.db_session  # type: ignore[no-any-return]


def _is_api_read() -> bool:
    return has_request_context() and request.method in ("GET", "HEAD") and request.path.startswith("/api/")
