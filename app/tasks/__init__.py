"""Celery tasks, a few lines each, calling services. Every module here is imported by ``celery_init_app``."""
