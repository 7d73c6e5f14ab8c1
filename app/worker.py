"""Worker and beat entry point: ``celery -A app.worker worker`` / ``celery -A app.worker beat``."""

from app import create_app

flask_app = create_app()
celery_app = flask_app.extensions["celery"]
