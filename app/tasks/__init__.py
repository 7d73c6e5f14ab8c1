"""Celery tasks, a few lines each, calling services.

The task modules are listed in :data:`TASK_MODULES` and imported by ``app.celery_app.celery_init_app``; the beat
schedule that runs them periodically is data in ``app.schedule``. A task module never imports another: a task that
wants another one run sends it by its declared name (:data:`REPLAN`), so each task's body stays its own.
"""

#: Every module that declares tasks, imported when Celery is attached to the app.
TASK_MODULES = ("app.tasks.dispatch", "app.tasks.forecasts", "app.tasks.maintenance", "app.tasks.planning",
                "app.tasks.simulation")

#: The re-plan of work that has not started (``app.tasks.planning.replan``), asked for by dispatch after a failure.
REPLAN = "gridshift.plan.replan"
