"""Handlers the isolation tests run in child processes (isolation="process"): a child imports
them by name, so they live at a module's top level."""

import ctypes
import os
import time
from pathlib import Path


def add(a, b):
    return a + b


def pid():
    return os.getpid()


def fails(message):
    raise ValueError(message)


def sleeps_in_c(marker):
    Path(marker).write_text(str(os.getpid()))
    time.sleep(3600)  # deaf to SIGTERM's cancel: killed after the grace


def reads_forever(marker):
    Path(marker).write_text(str(os.getpid()))
    read_end, _ = os.pipe()
    os.read(read_end, 1)  # blocked in a C-level read that nothing will ever answer


def stops_when_told(context, marker):
    Path(marker).write_text(str(os.getpid()))
    context.progress(1, 3, "waiting to be told")
    while not context.cancelled.wait(0.05):
        pass
    return "stopped"


def segfaults():
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def exits():
    os._exit(3)


def unstorable():
    return {1, 2, 3}  # a set is not JSON


def reports(context, rows):
    for done in range(1, rows + 1):
        context.progress(done, rows, "rows")
    return context.job_id


async def async_add(a, b):
    import asyncio

    await asyncio.sleep(0)
    return a + b


async def async_sleeps(context, marker):
    import asyncio

    Path(marker).write_text(str(os.getpid()))
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        Path(marker + ".cancelled").write_text(str(context.cancel_reason))
        raise


def steps(context):
    first = context.step("first", lambda: {"pid": os.getpid()})
    if context.attempt == 1:
        raise ConnectionError("after the first step")
    return first


class Unprintable(ValueError):
    """A handler's own exception whose __str__, __repr__ or both raise (`refuses` names which)."""

    def __init__(self, refuses):
        super().__init__("the handler failed")
        self.refuses = refuses

    def __str__(self):
        if "__str__" in self.refuses:
            raise RuntimeError("__str__ refuses")
        return super().__str__()

    def __repr__(self):
        if "__repr__" in self.refuses:
            raise RuntimeError("__repr__ refuses")
        return super().__repr__()


def raises_unprintable(refuses):
    raise Unprintable(refuses)
