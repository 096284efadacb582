"""How the checks are kept and run: the registry, `exercise()`, and the proxy that records which
port verbs the checks called, so that a test can name any verb the suite leaves unchecked."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Iterable, cast

from leased.backends import ports
from leased.backends.ports import Backend

MakeBackend = Callable[[], Backend]
Check = Callable[[MakeBackend], None]
CHECKS: dict[str, Check] = {}


def check(function: Check) -> Check:
    """Register a check: it takes a factory of backends (all on one database) and raises
    AssertionError, naming the promise, when the backend breaks it."""
    if function.__name__ in CHECKS:
        raise ValueError(f"two conformance checks are named {function.__name__!r}")
    CHECKS[function.__name__] = function
    return function


def exercise(make_backend: MakeBackend, only: Iterable[str] | None = None, recorder: Recorder | None = None) -> None:
    """Run the checks (all, or those named in `only`) against backends from `make_backend`, each
    check on the database as the previous one left it: give a fresh database per call to isolate
    them. The backend's schema is created first. With a `recorder`, every verb the checks call is
    noted in it (see port_verbs())."""
    for name in only if only is not None else CHECKS:
        given = make_backend()
        backend = given if recorder is None else recorder.wrap(given)
        try:
            backend.migrate()
            CHECKS[name](lambda: backend)  # noqa: B023 - called in this iteration, before backend is rebound
        finally:
            backend.close()


def port_verbs() -> dict[str, str]:
    """Every verb a backend offers, read from the Protocol classes of leased.backends.ports that
    make up `Backend`: {verb: the port that declares it}. A verb is a method or a property; plain
    attributes (`clock`, `reclaims_beside_claims`) are declarations, not verbs."""
    verbs: dict[str, str] = {}
    for port in reversed(Backend.__mro__):
        if port.__module__ != ports.__name__:
            continue
        for name, member in vars(port).items():
            if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                verbs[name] = port.__name__
    return verbs


class Recorder:
    """Notes which port verbs were called on the backends it wrapped: `called`, and `uncalled()`
    against port_verbs(). A verb counts when the checks call it through the port, not when the
    backend calls its own verbs inside."""

    def __init__(self) -> None:
        self.called: set[str] = set()
        self._verbs = port_verbs()

    def wrap(self, backend: Backend) -> Backend:
        return cast(Backend, _Recording(backend, self._verbs, self.called))

    def uncalled(self) -> dict[str, str]:
        """{verb: its port} of every verb no check called."""
        return {verb: port for verb, port in self._verbs.items() if verb not in self.called}


class _Recording:
    """A backend seen through a window that notes each verb called on it."""

    def __init__(self, backend: Backend, verbs: dict[str, str], called: set[str]) -> None:
        self._backend = backend
        self._verbs = verbs
        self._called = called

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._backend, name)
        if name not in self._verbs:
            return value
        if not callable(value):  # a property (`where`): reading it is calling it
            self._called.add(name)
            return value

        @functools.wraps(value)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            self._called.add(name)
            return value(*args, **kwargs)

        return recorded
