"""`leased worker APP --processes N`: a supervisor and N worker processes, for CPU-bound handlers.

One worker process runs its sync handlers in threads that share one interpreter lock, so CPU-bound
work uses one core however many slots it has. The supervisor starts N `python -m leased worker`
processes with the same options, restarts one that died (with backoff, and a line naming its exit
status or signal), passes SIGTERM and SIGINT on for the two-phase shutdown, and exits once they
all have. A process that keeps dying stops it loudly instead of looping forever.

The children are subprocesses running the command itself, not multiprocessing children: each is
exactly the `leased worker` an operator would start by hand (its own imports, logging to the same
stderr, its own signal handling), nothing is pickled, and nothing a fork would copy (connections,
threads) exists in the supervisor anyway. The supervisor never imports the APP and never opens a
database connection: the children do all of that, and say so themselves when it fails.

When a worker process dies (not a clean exit), the supervisor knows at once, and does not leave
its jobs to wait out their leases: it runs `leased bury-worker APP PREFIX HOW`, a short process of
the same APP, which ends that worker's attempts as crashed, naming the signal or exit status, and
marks its row gone (backend.bury_workers). A job whose attempts keep killing their process is
quarantined after its task's max_crashes (a poison job), not retried up to max_attempts. The
supervisor itself still opens no connection.

They run in a process group of their own, so that a terminal's Ctrl-C, which goes to the whole
foreground group, reaches them once, through the supervisor: twice would be a forced stop. Under
systemd, KillMode=mixed does the same for its SIGTERM. On Linux a child gets SIGTERM if the
supervisor dies without passing one on (SIGKILL, OOM), so no worker outlives it unseen.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field

from leased.worker_ids import SUPERVISOR_VARIABLE

log = logging.getLogger("leased.supervisor")

# A process that died this many times within this many seconds stops the supervisor: something
# about it (a poison job, a broken deploy) will not fix itself by restarting.
MAX_DEATHS = 5
DEATH_WINDOW_SECONDS = 60.0
# Restarts wait this long after the first death, doubling each time up to the most; a process that
# stayed up STABLE_SECONDS starts again from the first wait.
FIRST_BACKOFF_SECONDS = 0.5
MOST_BACKOFF_SECONDS = 10.0
STABLE_SECONDS = 30.0
# The exit status of a child whose command cannot work (a wrong APP, no schema): its one-line
# error is above, and the same command would fail the same way, so it is not restarted. (sysexits' EX_CONFIG)
CANNOT_START = 78


def process_count(value: str) -> int:
    """--processes: a whole number from 1, or `auto` for the cores this process may run on."""
    if value.strip().lower() == "auto":
        try:
            return len(os.sched_getaffinity(0))  # a container's or taskset's share, not the whole machine
        except AttributeError:  # not on Linux
            return os.cpu_count() or 1
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"{value!r} is neither a whole number from 1 nor 'auto'")
    return count


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


@dataclass
class Slot:
    """One of the N places a worker process runs in, across its restarts."""

    number: int
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    restart_at: float | None = 0.0  # when to start it next (now: 0.0); None while it runs or stays down
    backoff: float = 0.0  # the wait before its next restart
    deaths: deque[float] = field(default_factory=deque)
    last_exit: int | None = None


class Supervisor:
    def __init__(self, worker_arguments: list[str], count: int, metrics_port: int | None = None):
        self.worker_arguments = worker_arguments  # `leased worker` arguments, without --processes
        self.metrics_port = metrics_port  # process n (from 0) serves its metrics on metrics_port + n
        self.slots = [Slot(number, backoff=FIRST_BACKOFF_SECONDS) for number in range(1, count + 1)]
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        self.stopping = False
        self.failure: str | None = None
        self._signals: list[int] = []
        self._burials: list[subprocess.Popen] = []  # bury-worker processes not yet reaped

    def run(self) -> int:
        """Until every child has exited after a signal or a failure: 0 if they all stopped cleanly."""
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        previous_fd = signal.set_wakeup_fd(wake_write)  # a signal makes the select below return
        handlers = {signum: signal.signal(signum, self._on_signal)
                    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)}
        log.info("supervisor %s: starting %d worker processes", self.identity, len(self.slots))
        try:
            while True:
                self._pass_on_signals()
                self._reap()
                if not self.stopping:
                    self._start_due()
                if self.stopping and not any(slot.process for slot in self.slots) and not self._burials:
                    break
                select.select([wake_read], [], [], self._next_timeout())
                try:
                    while os.read(wake_read, 512):
                        pass
                except BlockingIOError:
                    pass
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            signal.set_wakeup_fd(previous_fd)
            os.close(wake_read)
            os.close(wake_write)
            for process in [slot.process for slot in self.slots] + self._burials:
                # only if the supervisor itself failed: no child outlives it
                if process is not None and process.poll() is None:
                    process.kill()
                    process.wait()
        if self.failure:
            log.error("supervisor %s: %s", self.identity, self.failure)
            return 1
        clean = all(slot.last_exit in (0, None) for slot in self.slots)
        log.info("supervisor %s stopped: %s", self.identity,
                 "every worker process exited cleanly" if clean else "a worker process did not exit cleanly")
        return 0 if clean else 1

    # Signals: the handler only records; the loop passes each on to every child, in order, so a
    # second SIGTERM reaches them as their second (a forced stop).
    def _on_signal(self, signum: int, frame: object) -> None:
        if signum != signal.SIGCHLD:
            self._signals.append(signum)

    def _pass_on_signals(self) -> None:
        while self._signals:
            signum = self._signals.pop(0)
            if not self.stopping:
                log.info("supervisor %s: %s, passing it on to the worker processes",
                         self.identity, signal.Signals(signum).name)
            self.stopping = True
            self._signal_children(signum)

    def _signal_children(self, signum: int) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is None:
                slot.process.send_signal(signum)

    def _stop_for(self, failure: str) -> None:
        """Stop loudly: the others finish their running jobs (one SIGTERM), then the supervisor fails."""
        if self.failure is None:
            self.failure = failure
        if not self.stopping:
            self.stopping = True
            self._signal_children(signal.SIGTERM)

    # Children.
    def _reap(self) -> None:
        now = time.monotonic()
        for burial in [burial for burial in self._burials if burial.poll() is not None]:
            self._burials.remove(burial)
            if burial.returncode != 0:
                log.warning("supervisor %s: could not end a dead worker process's attempts (its error is above); "
                            "they end when their leases expire", self.identity)
        for slot in self.slots:
            if slot.process is None or (code := slot.process.poll()) is None:
                continue
            pid, slot.process, slot.last_exit = slot.process.pid, None, code
            if code not in (0, CANNOT_START):  # it may have died holding jobs: end them now
                self._burials.append(self._bury(pid, describe_exit(code)))
            if self.stopping:
                log.info("supervisor %s: worker process %d (pid %d) %s", self.identity, slot.number, pid,
                         describe_exit(code))
                continue
            if code == CANNOT_START:
                self._stop_for(f"worker process {slot.number} (pid {pid}) cannot start (its error is above); "
                               "stopping the others")
                continue
            slot.deaths.append(now)
            while slot.deaths and slot.deaths[0] < now - DEATH_WINDOW_SECONDS:
                slot.deaths.popleft()
            if len(slot.deaths) >= MAX_DEATHS:
                log.warning("supervisor %s: worker process %d (pid %d) %s", self.identity, slot.number, pid,
                            describe_exit(code))
                self._stop_for(f"worker process {slot.number} died {len(slot.deaths)} times within "
                               f"{DEATH_WINDOW_SECONDS:g}s (last: {describe_exit(code)}); stopping the others")
                continue
            if now - slot.started_at >= STABLE_SECONDS:
                slot.backoff = FIRST_BACKOFF_SECONDS
            slot.restart_at = now + slot.backoff
            log.warning("supervisor %s: worker process %d (pid %d) %s; restarting it in %gs", self.identity,
                        slot.number, pid, describe_exit(code), slot.backoff)
            slot.backoff = min(slot.backoff * 2, MOST_BACKOFF_SECONDS)

    def _start_due(self) -> None:
        now = time.monotonic()
        for slot in self.slots:
            if slot.process is None and slot.restart_at is not None and slot.restart_at <= now:
                slot.process = self._start(slot)
                slot.started_at, slot.restart_at = time.monotonic(), None

    def _start(self, slot: Slot) -> subprocess.Popen:
        arguments = list(self.worker_arguments)
        if self.metrics_port is not None:
            arguments += ["--metrics-port", str(self.metrics_port + slot.number - 1)]
        env = {**os.environ, SUPERVISOR_VARIABLE: self.identity}
        process = subprocess.Popen([sys.executable, "-m", "leased", "worker", *arguments], env=env,
                                   stdin=subprocess.DEVNULL, preexec_fn=_child_setup(os.getpid()))
        log.info("supervisor %s: worker process %d started (pid %d)", self.identity, slot.number, process.pid)
        return process

    def _bury(self, pid: int, how: str) -> subprocess.Popen:
        """End the attempts of worker process `pid`, which died (`how`), in a process of its own:
        the supervisor opens no connection. Its worker id starts host:SUPERVISOR_PID/pid: (worker_ids)."""
        host, _, supervisor = self.identity.rpartition(":")
        return subprocess.Popen([sys.executable, "-m", "leased", "bury-worker", self.worker_arguments[0],
                                 f"{host}:{supervisor}/{pid}:", how],
                                stdin=subprocess.DEVNULL, start_new_session=True)  # no Ctrl-C of the terminal's

    def _next_timeout(self) -> float | None:
        """Until the next restart is due; else only a signal (a child's end is one) wakes the loop."""
        due = [slot.restart_at for slot in self.slots if slot.process is None and slot.restart_at is not None]
        return max(0.0, min(due) - time.monotonic()) if due and not self.stopping else None


PR_SET_PDEATHSIG = 1


def _child_setup(supervisor: int):
    """Run in the child between fork and exec: its own process group, and on Linux SIGTERM when the
    supervisor dies (checked once more after asking, in case it died in between). prctl is looked
    up here, before the fork: the child only calls it."""
    prctl = None
    if sys.platform.startswith("linux"):
        import ctypes  # here, not at the top: every `leased` command imports this module

        prctl = ctypes.CDLL(None, use_errno=True).prctl

    def setup() -> None:
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != supervisor:
                os.kill(os.getpid(), signal.SIGTERM)

    return setup
