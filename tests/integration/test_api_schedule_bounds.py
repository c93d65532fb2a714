"""The work one request may make the API compute is bounded, and such requests run one
at a time per process (issue 27, item 10): a read token once bought ~0.9 s of CPU with
`GET /v1/next-fires?cron=0+0+29+2+1&count=1000` and ~0.5 s with an explain over
1970-2199, and eight at once slowed every other tenant. No time is measured here: what
is asserted is the bound (the span searched, the range refused, one at a time)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

import kit.api.schedule_preview as schedule_preview

pytestmark = pytest.mark.integration
Headers = Callable[..., dict[str, str]]


def test_a_preview_searches_at_most_a_hundred_years(client: TestClient, auth: Headers) -> None:
    """A leap-day cron asked for 1,000 fires lists the 24 of the next hundred years,
    not 1,000 over four thousand."""
    after = "2025-01-01T00:00:00Z"
    got = client.get(
        "/v1/next-fires",
        params={"cron": "0 0 29 2 *", "count": 1000, "after": after},
        headers=auth(scopes=("read",)),
    )
    assert got.status_code == 200, got.text
    body = got.json()
    until = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(days=36_525)
    assert datetime.fromisoformat(body["until"]) == until
    years = [datetime.fromisoformat(f["utc"]).year for f in body["fires"]]
    assert years == [y for y in range(2028, 2125, 4) if y != 2100]
    dense = client.get(
        "/v1/next-fires",
        params={"cron": "* * * * *", "count": 1000, "after": after},
        headers=auth(scopes=("read",)),
    ).json()
    assert len(dense["fires"]) == 1000  # the count still bounds a dense schedule


def test_explain_over_more_than_366_days_is_refused(client: TestClient, auth: Headers) -> None:
    h = auth()
    made = client.post(
        "/v1/jobs",
        json={"name": "m", "schedule": {"cron": "* * * * *"}, "task": {"type": "noop"}},
        headers=h,
    )
    job = made.json()["job_id"]
    wide = {"from": "1970-01-01T00:00:00Z", "to": "2199-01-01T00:00:00Z", "limit": 2000}
    got = client.get(f"/v1/jobs/{job}/explain", params=wide, headers=h)
    assert got.status_code == 422, got.text
    [problem] = got.json()["error"]["fields"]
    assert problem["field"] == "from" and "at most 366 days" in problem["reason"], problem
    now = datetime.now(UTC)
    year = {"from": now.isoformat(), "to": (now + timedelta(days=366)).isoformat()}
    assert client.get(f"/v1/jobs/{job}/explain", params=year, headers=h).status_code == 200


def test_previews_are_computed_one_at_a_time(
    client: TestClient, auth: Headers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four previews sent at once are computed one after the other: the others wait
    without holding the interpreter."""
    active, most = 0, 0
    lock = threading.Lock()
    real = schedule_preview.preview

    def watched(*args: Any) -> Any:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        try:
            time.sleep(0.2)  # long enough for the others to arrive
            return real(*args)
        finally:
            with lock:
                active -= 1

    monkeypatch.setattr(schedule_preview, "preview", watched)
    headers = auth(scopes=("read",))
    statuses: list[int] = []

    def ask() -> None:
        got = client.get("/v1/next-fires", params={"every_s": 60}, headers=headers)
        statuses.append(got.status_code)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert statuses == [200] * 4
    assert most == 1
