"""WSGI entry point for gunicorn: ``gunicorn 'app.wsgi:app'``."""

import gc

from app import create_app

app = create_app()

# The app's modules, mappers, schemas and the OpenAPI document are ~300,000 objects that live as long as the
# process. Left to the cyclic garbage collector, every full collection walks all of them: 160-360 ms with the
# whole worker (every thread) stopped, a dozen times a minute at 200 requests/s (measured with gc.callbacks under
# bench/load_bench.py), which was the read latency's tail. Freezing moves them out of the collector's sight; what
# requests allocate is still collected as before.
gc.collect()
gc.freeze()
