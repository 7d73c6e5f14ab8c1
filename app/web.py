"""Dashboard wiring: serves web/templates and web/static; the pages read and write only through /api/v1.

The only server-side logic here is the sign-in: a tenant token is checked with ``auth.authenticate`` and the
session keeps its id (never the secret), the random id of its server-side record (``auth.open_web_session``: signing
out, revoking the token or rotating the secret key ends it, whatever copy of the cookie is replayed) and a CSRF token, which the pages send as ``X-CSRF-Token`` on every
state-changing API call. Charts come from the plotly.js file shipped inside the installed ``plotly`` package and the
API docs from the ``swagger-ui-bundle`` package: the dashboard needs no internet.
"""

from __future__ import annotations

import hmac
import secrets
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from flask import Blueprint, Flask, abort, redirect, render_template, request, send_from_directory, session
from werkzeug.wrappers import Response

from app import extensions
from app.errors import Unauthorized
from app.services import auth

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
PAGES = {
    "overview": "Overview",
    "submit": "Submit",
    "jobs": "Jobs",
    "plan": "Plan",
    "reports": "Reports",
}
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self' data:; frame-ancestors 'none'; base-uri 'self'; form-action 'self'"
)

bp = Blueprint("web", __name__, template_folder=str(WEB_DIR / "templates"))


def _plotly_dir() -> Path:
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data"


def _swagger_dir() -> Path | None:
    try:
        import swagger_ui_bundle
    except ImportError:
        return None
    return Path(swagger_ui_bundle.swagger_ui_path)


@bp.route("/static/<path:filename>")
def static(filename: str) -> Response:
    if filename.startswith("swagger-ui/"):
        folder = _swagger_dir()
        if folder is None:
            abort(404, "swagger-ui-bundle is not installed")
        return send_from_directory(folder, filename.removeprefix("swagger-ui/"), max_age=86400)
    return send_from_directory(WEB_DIR / "static", filename, max_age=300)


@bp.route("/ui/vendor/plotly.min.js")
def plotly_js() -> Response:
    return send_from_directory(_plotly_dir(), "plotly.min.js", max_age=86400)


def _signed_in() -> auth.Principal | None:
    if not session.get("token_id"):
        return None
    try:
        return auth.web_session_principal(extensions.db_session(), session.get("sid"), session.get("token_id"))
    except Unauthorized:
        session.clear()
        return None


def _safe_next(target: str | None) -> str:
    """Only same-site paths: an open redirect after sign-in would let a link send the user anywhere.

    Control characters and backslashes are refused too: a line break cannot go into the Location header (the
    sign-in failed with a 500), and browsers read ``/\\host`` as ``//host``.
    """
    if not target or any(c < " " or c in "\\\x7f" for c in target):
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


def _same(given: str, expected: str) -> bool:
    """Constant-time comparison of CSRF tokens; a missing token never matches (not even an empty form field)."""
    return bool(given) and bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


def _page(name: str, **context: object) -> Response | str:
    p = _signed_in()
    if p is None:
        return redirect("/ui/signin?" + urlencode({"next": request.full_path.rstrip("?")}))
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return render_template(f"{name}.html", page=name, pages=PAGES, principal=p, csrf=session["csrf"], **context)


@bp.route("/ui/signin", methods=["GET", "POST"])
def signin() -> Response | str:
    error = None
    if request.method == "POST":
        if not _same(request.form.get("csrf", ""), session.get("signin_csrf", "")):
            error = "The form expired; please try again."
        else:
            try:
                p = auth.authenticate(extensions.db_session(), request.form.get("token", "").strip())
            except Unauthorized:
                error = "That token is invalid, expired or revoked."
            else:
                session.clear()
                session["sid"] = auth.open_web_session(extensions.db_session(), p.token_id)
                session["token_id"] = p.token_id
                session["csrf"] = secrets.token_urlsafe(32)
                session.permanent = False
                return redirect(_safe_next(request.form.get("next")))
    return signin_page(error, 401 if error else 200)


def signin_page(error: str | None, status: int) -> Response:
    """The sign-in form (with a fresh form token), showing ``error`` if any."""
    session["signin_csrf"] = secrets.token_urlsafe(32)
    html = render_template("signin.html", error=error, csrf=session["signin_csrf"],
                           next=_safe_next(request.values.get("next")), page="signin", pages=PAGES, principal=None)
    return Response(html, status=status, mimetype="text/html")


@bp.route("/ui/signout", methods=["POST"])
def signout() -> Response:
    if _same(request.form.get("csrf", ""), session.get("csrf", "")):
        auth.end_web_session(extensions.db_session(), session.get("sid"))  # a copy of the cookie dies with it
        session.clear()
    return redirect("/ui/signin")


@bp.route("/")
def index() -> Response | str:
    return _page("overview")


@bp.route("/ui/submit")
def submit_page() -> Response | str:
    return _page("submit")


@bp.route("/ui/jobs")
def jobs_page() -> Response | str:
    return _page("jobs")


@bp.route("/ui/jobs/<int:job_id>")
def job_page(job_id: int) -> Response | str:
    return _page("job", job_id=job_id)


@bp.route("/ui/plan")
def plan_page() -> Response | str:
    return _page("plan", plan_time_limit_s=extensions.settings().plan_time_limit_s)


@bp.route("/ui/reports")
def reports_page() -> Response | str:
    return _page("reports")


def _security_headers(resp: Response) -> Response:
    if request.path == "/" or request.path.startswith("/ui/"):
        resp.headers.setdefault("Content-Security-Policy", CSP)
        resp.headers.setdefault("X-Content-Type-Options", "nosniff")
        resp.headers.setdefault("Referrer-Policy", "same-origin")
        if resp.mimetype == "text/html":
            resp.headers.setdefault("Cache-Control", "no-store")
    return resp


def init_app(app: Flask) -> None:
    app.register_blueprint(bp)
    app.after_request(_security_headers)
