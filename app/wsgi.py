"""WSGI entry point for gunicorn: ``gunicorn --preload 'app.wsgi:app'``.

With ``--preload`` the master imports and builds the app once and forks ready workers: a worker (re)started under
load answers at once instead of spending its first seconds importing, and the workers share the app's pages.
"""

import gc
import os

from app import create_app, migrate
from app.config import Settings

migrate.require_schema(Settings.from_env(), "web")  # one line and exit 3 on a database behind the code, not a trace
app = create_app()

# A forked worker must never use a database connection its parent opened: it starts with an empty pool of its
# own (the parent's connections, if any, stay the parent's; ``close=False`` leaves them open for it).
_engine = app.extensions["gridshift"].engine
os.register_at_fork(after_in_child=lambda: _engine.dispose(close=False))

# The app's modules, mappers, schemas and the OpenAPI document are ~300,000 objects that live as long as the
# process. Left to the cyclic garbage collector, every full collection walks all of them: 160-360 ms with the
# whole worker (every thread) stopped, a dozen times a minute at 200 requests/s (measured with gc.callbacks under
# bench/load_bench.py), which was the read latency's tail. Freezing moves them out of the collector's sight (and,
# done before the fork, keeps the collector from writing to the pages the workers share); what requests allocate
# is still collected as before.
gc.collect()
gc.freeze()
