"""What the model adapters' retry loop decided, for tests that check it without a clock."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gta.models import chat


def record_waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The seconds the retry loop chooses to wait before each retry, in order, from now on.

    The loop still sleeps them: a test asserts what was chosen (the server's ``Retry-After``,
    the backoff), which a busy machine cannot change, instead of timing the call.
    """
    waits: list[float] = []
    choose = chat.backoff_delay

    def recorded(*args: Any, **kwargs: Any) -> float:
        waits.append(choose(*args, **kwargs))
        return waits[-1]

    monkeypatch.setattr(chat, "backoff_delay", recorded)
    return waits
