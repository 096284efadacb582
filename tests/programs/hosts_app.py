"""The app the many-hosts tests' `leased worker` processes run, one per network namespace.

$LEASED_DATABASE_URL reaches PostgreSQL through the host's gateway, $HOSTS_HOST names the host and
$HOSTS_MARKERS is a directory every namespace shares (the filesystem is not namespaced), where the
handlers leave what the test reads: `<job>-<attempt>.started` (the worker's id),
`<job>-<attempt>.cancelled` (the cause the worker gave) and `<job>-<attempt>.returned`.
"""

import os
import threading
from pathlib import Path

from leased import Backoff, Leased

app = Leased(os.environ["LEASED_DATABASE_URL"])
HOST = os.environ.get("HOSTS_HOST", "?")
MARKERS = Path(os.environ.get("HOSTS_MARKERS", "."))
if os.environ.get("HOSTS_PRUNE_AT_ONCE"):  # the worker's first pruning pass as it starts, not within a minute
    from leased.engine import pruner

    pruner.FIRST_PASS_WITHIN = 0.0
    _prune = pruner.prune

    def _prune_and_say_so(*args, **kwargs):
        """A pass holds a connection of its own while it runs: `pruned-<host>` says this host's
        first pass is over, so that a test counting connections can wait for it."""
        try:
            return _prune(*args, **kwargs)
        finally:
            (MARKERS / f"pruned-{HOST}").touch()

    pruner.prune = _prune_and_say_so
LEASE = 2.0  # short, so that a cut host's jobs come back within seconds
RETRY_IN = 2.5  # flaky's one retry is due this long after its failure, by the database's clock


@app.task(name="hold", lease=LEASE, takes_context=True, max_attempts=3)
def hold(context, mode: str) -> str:
    """mode "block": until cancelled, then until released; "wait": until released; else at once."""
    marker = MARKERS / f"{context.job_id}-{context.attempt}"
    marker.with_suffix(".started").write_text(f"{HOST} {context.worker_id}")
    if mode == "block" and context.attempt == 1:
        # Until the worker says to stop (its context), as a well-behaved handler waits; then keep
        # going as if deaf to it, and return after the test lets it: whatever comes back late
        # must not be recorded.
        while not context.cancelled.wait(0.02):
            pass
        marker.with_suffix(".cancelled").write_text(str(context.cancel_reason))
        _until_released(context.job_id)
    if mode == "wait":  # until the test lets it, keeping its lease all the while
        _until_released(context.job_id)
    marker.with_suffix(".returned").write_text(HOST)
    return f"done by {HOST}"


def _until_released(job_id: int) -> None:
    # An Event's wait (monotonic), not time.sleep, which libfaketime can break for a skewed clock.
    while not (MARKERS / f"release-{job_id}").exists():
        threading.Event().wait(0.02)


@app.task(name="flaky", lease=LEASE, takes_context=True, max_attempts=2, backoff=Backoff(base=RETRY_IN, jitter=0))
def flaky(context) -> str:
    (MARKERS / f"{context.job_id}-{context.attempt}.started").write_text(f"{HOST} {context.worker_id}")
    if context.attempt == 1:
        raise RuntimeError("fails once")
    return f"done by {HOST}"
