"""A small Python client of the cronfleet API: jobs, runs, dead letters and the pull
queues, with a worker loop for a queue (`work`). Standard library only (urllib), so
`pip install cronfleet` brings nothing more for it; bodies are the TypedDicts of
kit.client.models, written from the API's OpenAPI document.

    from kit.client import Client
    api = Client("http://127.0.0.1:8080", token)
    job = api.create_job({"name": "hello", "schedule": {"every_s": 10},
                          "task": {"type": "noop"}})
    runs = api.job_runs(job["job_id"])["runs"]

Every answer that is not a 2xx raises ApiError with the API's own code, message and
fields (a 422 names each offending field); a 503 carries its Retry-After.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from kit.client import models as m


@dataclass
class ApiError(Exception):
    """A refused request: the HTTP status, the API's error code, message and fields."""

    status: int
    code: str
    message: str
    fields: list[tuple[str, str]] = field(default_factory=list)
    retry_after_s: float | None = None

    def __str__(self) -> str:
        return f"HTTP {self.status} {self.code}: {self.message}"


class Client:
    def __init__(self, base_url: str, token: str, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._auth = f"Bearer {token}"
        self.timeout_s = timeout_s

    # -- plumbing -------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """One call: JSON in, JSON (or None for a 204) out; ApiError otherwise."""
        url = self.base_url + path
        params = {k: _query_value(v) for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = None if body is None else json.dumps(body).encode()
        sent = {"Authorization": self._auth, "Accept": "application/json", **(headers or {})}
        if data is not None:
            sent["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as refused:
            raise _api_error(refused) from None
        return json.loads(raw) if raw else None

    @staticmethod
    def _path(*parts: str) -> str:
        return "/".join(urllib.parse.quote(p, safe="") for p in parts)

    # -- jobs -------------------------------------------------------------------------------

    def create_job(self, job: m.JobIn, idempotency_key: str | None = None) -> m.JobOut:
        """A retry with the same key and body returns the same job."""
        key = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return cast(m.JobOut, self.request("POST", "/v1/jobs", job, headers=key))

    def create_jobs(self, jobs: list[m.JobIn]) -> m.JobBatchOut:
        return cast(m.JobBatchOut, self.request("POST", "/v1/jobs:batch", {"jobs": jobs}))

    def get_job(self, job_id: str) -> m.JobOut:
        return cast(m.JobOut, self.request("GET", f"/v1/jobs/{self._path(job_id)}"))

    def update_job(self, job_id: str, changes: m.JobPatch) -> m.JobOut:
        return cast(m.JobOut, self.request("PATCH", f"/v1/jobs/{self._path(job_id)}", changes))

    def pause_job(self, job_id: str) -> m.JobOut:
        return self.update_job(job_id, {"paused": True})

    def resume_job(self, job_id: str) -> m.JobOut:
        return self.update_job(job_id, {"paused": False})

    def delete_job(self, job_id: str) -> None:
        self.request("DELETE", f"/v1/jobs/{self._path(job_id)}")

    def list_jobs(self, **filters: Any) -> m.JobListOut:
        """GET /v1/jobs: name_prefix, paused, task_type, priority, last_status, cursor,
        limit."""
        return cast(m.JobListOut, self.request("GET", "/v1/jobs", query=filters))

    def iter_jobs(self, **filters: Any) -> Iterator[m.JobSummaryOut]:
        """Every job matching the filters, a page at a time."""
        cursor = None
        while True:
            page = self.list_jobs(**filters, cursor=cursor)
            yield from page["jobs"]
            cursor = page["next_cursor"]
            if cursor is None:
                return

    def run_now(self, job_id: str, idempotency_key: str | None = None) -> m.RunOut:
        key = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        path = f"/v1/jobs/{self._path(job_id)}/runs"
        return cast(m.RunOut, self.request("POST", path, headers=key))

    def backfill(self, job_id: str, start: str, end: str) -> m.BackfillOut:
        """Runs for every fire owed in [start, end) (ISO 8601 with an offset)."""
        path = f"/v1/jobs/{self._path(job_id)}:backfill"
        return cast(m.BackfillOut, self.request("POST", path, {"from": start, "to": end}))

    def explain(self, job_id: str, start: str | None = None, end: str | None = None) -> Any:
        path = f"/v1/jobs/{self._path(job_id)}/explain"
        return self.request("GET", path, query={"from": start, "to": end})

    def audit(self, job_id: str, cursor: str | None = None) -> m.AuditPageOut:
        path = f"/v1/jobs/{self._path(job_id)}/audit"
        return cast(m.AuditPageOut, self.request("GET", path, query={"cursor": cursor}))

    def next_fires(self, **schedule: Any) -> m.PreviewOut:
        """GET /v1/next-fires: cron (+ timezone), every_s (+ anchor) or at; after, count."""
        return cast(m.PreviewOut, self.request("GET", "/v1/next-fires", query=schedule))

    # -- runs -------------------------------------------------------------------------------

    def job_runs(
        self, job_id: str, status: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> m.RunPageOut:
        """A job's runs, newest first (`status`: a run state, `claimed` included)."""
        query = {"status": status, "cursor": cursor, "limit": limit}
        path = f"/v1/jobs/{self._path(job_id)}/runs"
        return cast(m.RunPageOut, self.request("GET", path, query=query))

    def get_run(self, run_id: str) -> m.RunDetailOut:
        """The run with every attempt: times, worker, lag, outcome, output."""
        return cast(m.RunDetailOut, self.request("GET", f"/v1/runs/{self._path(run_id)}"))

    def cancel_run(self, run_id: str) -> m.CancelledOut:
        path = f"/v1/runs/{self._path(run_id)}:cancel"
        return cast(m.CancelledOut, self.request("POST", path))

    # -- dead letters -----------------------------------------------------------------------

    def dead_letters(
        self, job_id: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> m.DeadLetterPageOut:
        query = {"job_id": job_id, "cursor": cursor, "limit": limit}
        return cast(m.DeadLetterPageOut, self.request("GET", "/v1/dead-letters", query=query))

    def replay_dead_letter(self, run_id: str) -> m.DeadLetterOut:
        path = f"/v1/dead-letters/{self._path(run_id)}:replay"
        return cast(m.DeadLetterOut, self.request("POST", path))

    def replay_dead_letters(self, **selection: Any) -> m.BulkReplayOut:
        """job_id, from, to, limit (see BulkReplayIn)."""
        return cast(m.BulkReplayOut, self.request("POST", "/v1/dead-letters:replay", selection))

    # -- queues -----------------------------------------------------------------------------

    def enqueue(
        self, queue: str, payload: Any, idempotency_key: str | None = None, **options: Any
    ) -> m.TaskCreatedOut:
        """delay_sec, max_attempts, timeout_sec (see TaskIn)."""
        key = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        path = f"/v1/queues/{self._path(queue)}/tasks"
        body = {"payload": payload, **options}
        return cast(m.TaskCreatedOut, self.request("POST", path, body, headers=key))

    def lease(
        self, queue: str, worker_id: str, max_tasks: int = 1, lease_sec: int = 60
    ) -> list[m.LeasedTaskOut]:
        body = {"worker_id": worker_id, "max_tasks": max_tasks, "lease_sec": lease_sec}
        answer = self.request("POST", f"/v1/queues/{self._path(queue)}/lease", body)
        return cast(list[m.LeasedTaskOut], answer["tasks"])

    def ack(self, task_id: str, lease_token: str, result: Any = None) -> m.AckOut:
        body: dict[str, Any] = {"lease_token": lease_token}
        if result is not None:
            body["result"] = result
        return cast(m.AckOut, self.request("POST", f"/v1/tasks/{self._path(task_id)}/ack", body))

    def nack(self, task_id: str, lease_token: str, error: str, retryable: bool = True) -> m.NackOut:
        body = {"lease_token": lease_token, "error": error, "retryable": retryable}
        return cast(m.NackOut, self.request("POST", f"/v1/tasks/{self._path(task_id)}/nack", body))

    def heartbeat(self, task_id: str, lease_token: str, extend_sec: int = 60) -> m.HeartbeatOut:
        body = {"lease_token": lease_token, "extend_sec": extend_sec}
        path = f"/v1/tasks/{self._path(task_id)}/heartbeat"
        return cast(m.HeartbeatOut, self.request("POST", path, body))

    def queue_stats(self, queue: str) -> m.QueueStatsOut:
        return cast(m.QueueStatsOut, self.request("GET", f"/v1/queues/{self._path(queue)}/stats"))

    def queues(self) -> m.QueuesOut:
        return cast(m.QueuesOut, self.request("GET", "/v1/queues"))

    def replay_queue_dead(self, queue: str, task_ids: list[str] | None = None) -> m.ReplayOut:
        body = {} if task_ids is None else {"task_ids": task_ids}
        path = f"/v1/queues/{self._path(queue)}/dead:replay"
        return cast(m.ReplayOut, self.request("POST", path, body))

    def work(
        self,
        queue: str,
        handler: Callable[[Any], Any],
        worker_id: str,
        stop: threading.Event,
        *,
        lease_sec: int = 60,
        idle_s: float = 1.0,
        max_tasks: int | None = None,
    ) -> int:
        """A worker loop for a queue: lease one task at a time, run `handler(payload)`
        while a heartbeat keeps the lease (every third of `lease_sec`), then ack with what
        it returned or nack with the error it raised (retryable unless it raised
        `Permanent`). Waits `idle_s` when the queue is empty. Until `stop` is set (or
        `max_tasks` were handled); returns how many tasks it handled."""
        handled = 0
        while not stop.is_set() and (max_tasks is None or handled < max_tasks):
            leased = self.lease(queue, worker_id, 1, lease_sec)
            if not leased:
                stop.wait(idle_s)
                continue
            task = leased[0]
            self._one(task, handler, lease_sec)
            handled += 1
        return handled

    def _one(self, task: m.LeasedTaskOut, handler: Callable[[Any], Any], lease_sec: int) -> None:
        done = threading.Event()

        def beat() -> None:
            while not done.wait(lease_sec / 3):
                try:
                    self.heartbeat(task["task_id"], task["lease_token"], lease_sec)
                except (ApiError, OSError):
                    return  # the lease is gone or the API away: the ack will tell

        beating = threading.Thread(target=beat, name="lease-heartbeat", daemon=True)
        beating.start()
        try:
            result = handler(task["payload"])
        except Permanent as exc:
            self.nack(task["task_id"], task["lease_token"], str(exc), retryable=False)
            return
        except Exception as exc:
            self.nack(task["task_id"], task["lease_token"], f"{type(exc).__name__}: {exc}")
            return
        finally:
            done.set()
            beating.join()
        self.ack(task["task_id"], task["lease_token"], result)


class Permanent(Exception):
    """Raised by a `work` handler: the task can never succeed; it goes dead at once."""


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _api_error(refused: urllib.error.HTTPError) -> ApiError:
    retry = refused.headers.get("Retry-After") if refused.headers else None
    try:
        body = json.loads(refused.read() or b"{}")
        error = body.get("error", {}) if isinstance(body, dict) else {}
    except (TimeoutError, ValueError, OSError):
        error = {}
    return ApiError(
        refused.code,
        str(error.get("code", "http_error")),
        str(error.get("message", refused.reason)),
        [(str(f.get("field")), str(f.get("reason"))) for f in error.get("fields", [])],
        float(retry) if retry and retry.replace(".", "", 1).isdigit() else None,
    )
