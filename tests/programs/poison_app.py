"""The app of the poison-job tests in tests/system/test_processes.py, run by `leased worker poison_app:app
--processes 2`: handlers that take their process down, every attempt, beside a healthy one.

Their long lease (30 s) is what tells the supervisor's release from the lease's expiry: a job
quarantined with "seen by its supervisor" in its errors did not wait out a lease.
"""

import asyncio
import ctypes
import os
import signal

from leased import Leased

app = Leased(os.environ["LEASED_DATABASE_URL"])
POISON = {"lease": 30.0, "max_attempts": 5, "max_crashes": 2}


@app.task(name="kills_its_worker", **POISON)
def kills_its_worker():
    os.kill(os.getpid(), signal.SIGKILL)  # a handler thread takes the whole worker process down


@app.task(name="kills_its_worker_async", **POISON)
async def kills_its_worker_async():
    await asyncio.sleep(0)
    os.kill(os.getpid(), signal.SIGKILL)


@app.task(name="segfaults", **POISON)
def segfaults():
    ctypes.string_at(0)  # a C extension's bad pointer: SIGSEGV in the worker process


@app.task(name="segfaults_isolated", isolation="process", **POISON)
def segfaults_isolated():
    ctypes.string_at(0)  # in the handler's child process: the worker lives, the attempt crashes


@app.task(name="healthy")
def healthy():
    return os.getpid()
