"""Energy rules at their edges that the mutation run showed untested: the worst-case time to the last
wake attempt when a policy allows more retries than the backoff takes to reach its cap many times over."""

from __future__ import annotations

import pytest

from greengpu.policy import SleepPolicy
from greengpu.sleep.wake_verify import JITTER_FRACTION, MAX_BACKOFF_S, last_attempt_s


@pytest.mark.parametrize("retries", [64, 65, 100])
def test_every_retry_counts_once_however_many_there_are(retries: int) -> None:
    # Each attempt: its timeout, noticed up to a poll late, then its backoff (doubling from 30 s, capped at
    # MAX_BACKOFF_S) with full jitter, noticed up to a poll late.
    policy = SleepPolicy(wake_timeout_s=600.0, wake_retries=retries, wake_backoff_s=30.0)
    poll_s = 60.0
    expected_s = sum(600.0 + 2 * poll_s + min(MAX_BACKOFF_S, 30.0 * 2 ** (k - 1)) * (1 + JITTER_FRACTION)
                     for k in range(1, retries + 1))
    assert last_attempt_s(policy, poll_s) == pytest.approx(expected_s)
