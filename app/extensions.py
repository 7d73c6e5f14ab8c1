"""Per-app database handle and the request-scoped session."""

from __future__ import annotations

from dataclasses import dataclass

from flask import Flask, current_app, g
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db import make_engine, make_session_factory
from app.services.auth import PrincipalCache


@dataclass
class Gridshift:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    principals: PrincipalCache


def init_app(app: Flask, settings: Settings) -> None:
    engine = make_engine(settings)
    app.extensions["gridshift"] = Gridshift(
        settings, engine, make_session_factory(engine), PrincipalCache(settings.auth_cache_s)
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
    """The session of the current request or task; views commit through services."""
    if "db_session" not in g:
        g.db_session = state().sessions()
    return g.db_session  # type: ignore[no-any-return]
