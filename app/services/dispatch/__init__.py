"""Dispatch: claim the due assignments of the current plan and submit them to their cluster's runtime.

The database is the single source of truth. A run moves through
``dispatching -> submitted -> running -> succeeded | failed | cancelled | lost`` (``app.enums.RunState``); the
job follows it. Exactly-once comes from three guards:

1. **Claim.** A due assignment is claimed by a conditional ``UPDATE jobs SET state='dispatching' WHERE
   state='planned'`` (on PostgreSQL after ``SELECT ... FOR UPDATE SKIP LOCKED``), and a job with an active
   run is never claimed again. The claim and the new ``runs`` row commit together.
2. **Idempotency key.** The run's ``run_key`` is stored before anything reaches the runtime; the connector
   receives it (Slurm job name, Ray submission id, Kubernetes Job name, local run dir). A redelivered submit
   first asks ``connector.find(run_key)`` and adopts the job it already submitted.
3. **Recovery.** A claim older than ``settings.claim_stale_s`` with no runtime job id (its worker died, or
   the embedded broker lost the message) is re-claimed by the tick and submitted again, which guard 2 makes
   safe.

An interruptible job whose assignment the planner split into chunks runs as one run per chunk: the run of chunk
*k* is claimed when that chunk is due, gets the chunk's length as its time limit (plus ``CHUNK_GRACE_MINUTES`` if
more chunks follow) and ``GRIDSHIFT_CHUNK_INDEX``, ``GRIDSHIFT_CHUNK_COUNT`` and ``GRIDSHIFT_CHUNK_END`` in its
environment, so the job can checkpoint and exit before the chunk ends. Between chunks the job rests in state
``paused`` (:mod:`.sync`) with ``resume_at`` = the next chunk's start, holding its capacity.

A submit that keeps failing is given up only when the runtime can say that it holds no job with that key;
otherwise the run waits in ``dispatching`` for the recovery above. The package's modules:

* :mod:`.claim` turns due assignments (and due chunks of paused jobs) into runs (guards 1 and 3);
* :mod:`.submit` sends a claimed run to its runtime (guard 2) or gives it up safely;
* :mod:`.sync` polls the runtimes of active runs and records what happened;
* :mod:`.failures` sends the job of a failed or lost run back to planning;
* :mod:`.maintenance` prunes the embedded broker's rows and finished local runs' scratch;
* :mod:`.run_keys` makes the idempotency key a run is known by on its runtime.

The modules import each other only downwards (``failures`` and ``run_keys`` below ``claim`` and ``submit``,
those below ``sync``); shared reads of assignments live in :mod:`app.services.assignments`.
"""
