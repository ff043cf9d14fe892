"""A service of the session, built on first use, once per process.

How :class:`~pytest_gta.session.state.GtaState` holds each of its services: typed, so no
service is looked up by a name.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar, cast

import pytest

from pytest_gta.errors import GtaUsageError

T = TypeVar("T")


class Lazy(Generic[T]):
    """One service of the session: built on first use, once per process, under the state's lock.

    A bad value found while building it (a :class:`~pytest_gta.errors.GtaUsageError`) becomes
    pytest's usage error here, the one place it does (exit status 4, before any case runs).
    """

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._value: T | None = None
        self._done = False

    def get(self, build: Callable[[], T]) -> T:
        """The service, built by ``build()`` the first time."""
        with self._lock:  # episodes run in pool threads (pytest_gta.run.pipeline)
            if not self._done:
                try:
                    self._value = build()
                except GtaUsageError as exc:
                    raise pytest.UsageError(str(exc)) from None
                self._done = True
            return cast(T, self._value)

    @property
    def built(self) -> T | None:
        """The service if it was built, else ``None`` (nothing asked for it yet)."""
        return self._value if self._done else None

    def take(self) -> T | None:
        """The service if it was built, forgotten (it is being stopped), else ``None``."""
        with self._lock:
            value, self._value, self._done = self.built, None, False
            return value
