"""Dashboard wiring: serves web/templates and web/static; the pages read and write only through /api/v1."""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Flask, redirect, send_from_directory
from werkzeug.wrappers import Response

WEB_DIR = Path(__file__).resolve().parent.parent / "web"

bp = Blueprint("web", __name__, template_folder=str(WEB_DIR / "templates"))


@bp.route("/static/<path:filename>")
def static(filename: str) -> Response:
    return send_from_directory(WEB_DIR / "static", filename, max_age=3600)


@bp.route("/")
def index() -> Response:
    return redirect("/api/v1/docs")


def init_app(app: Flask) -> None:
    app.register_blueprint(bp)
