"""Worker and beat entry point: ``celery -A app.worker worker`` / ``celery -A app.worker beat``."""

from app import create_app, migrate
from app.config import Settings

migrate.require_schema(Settings.from_env(), "worker")  # one line and exit 3 on a database behind the code
flask_app = create_app()
celery_app = flask_app.extensions["celery"]
