"""The console's pages to act from: create, delete and backfill a job; what is
happening now across jobs, with bulk cancel and replay; the pull queues, with replay
of their dead tasks; charts of the run history over time.

Every action goes through the API's own route or store call with the session's token,
so it is checked and refused as over HTTP (scopes, the task policy, field errors named
as the API names them), and answers with a redirect carrying a one-line message.
"""

from __future__ import annotations

import json
import re
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response

from kit.api import routes as api_routes
from kit.api.backfill import BackfillIn, backfill_job
from kit.api.console.charts import RANGES, chart_range, charts_of
from kit.api.console.edit import body_from_form, validated
from kit.api.console.pages import NOT_FOUND, UNFINISHED, _call
from kit.api.console.web import (
    PREFIX,
    ConsoleError,
    answered,
    checked_form,
    checked_form_lists,
    checked_inputs,
    render,
    require_reader,
    require_session,
    require_write,
    safe_next,
)
from kit.api.models import OVERLAPS, PRIORITIES, JobIn
from kit.api.queues import QUEUE_PATTERN
from kit.api.state import engine_of, settings_of
from kit.core.dispatch import PRIORITY_TIERS
from kit.core.errors import FieldError, FieldErrors
from kit.store import console_views as views
from kit.store import dead_letters as dead_letter_store
from kit.store import run_cancel as cancel_store
from kit.store.console_sessions import ConsoleSession
from kit.store.errors import NameTaken, RunNotFound
from kit.tasks import registry

router = APIRouter(prefix=PREFIX, include_in_schema=False, dependencies=[Depends(checked_inputs)])
Session = Annotated[ConsoleSession, Depends(require_session)]
Reader = Annotated[ConsoleSession, Depends(require_reader)]
MAX_BULK = 100  # runs acted on by one bulk form (a form holds at most 100 fields)
EXAMPLE_TASK = json.dumps({"type": "http", "url": "https://example.org/hook", "method": "POST"})


# -- create, delete, backfill --------------------------------------------------------------


def _new_form(
    request: Request,
    session: ConsoleSession,
    form: dict[str, str] | None = None,
    problems: list[tuple[str, str]] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    values = {"priority": "normal", "overlap": "allow", "task": EXAMPLE_TASK, **(form or {})}
    return render(
        request,
        "new_job.html",
        status_code=status_code,
        session=session,
        form=values,
        problems=problems or [],
        priorities=PRIORITIES,
        overlaps=OVERLAPS,
        task_types=registry.names(),
        pause_default=settings_of(request).pause_after_dead,
    )


@router.get("/jobs/new")
async def new_job_page(request: Request, session: Reader) -> HTMLResponse:
    return _new_form(request, session)


@router.post("/jobs/new")
async def create_job(request: Request, session: Session) -> Response:
    """Through POST /v1/jobs's own model and route: the same checks, the same 422s."""
    form = await checked_form(request, session)
    require_write(session)
    body, problems = body_from_form(form)
    model = None
    if not problems:
        model, problems = validated(body, JobIn)
    status = 422
    if model is not None:
        try:
            made = await _call(api_routes.create_job, model, request, session.token)
            job = json.loads(bytes(made.body))
            message = f"created {job['name']}"
            return answered(request, session, f"{PREFIX}/jobs/{job['job_id']}", message)
        except FieldError as exc:
            problems = exc.problems
        except NameTaken:
            problems = [("name", "is already used by another job")]
        except ConsoleError as exc:  # the API's refusal (403: a scope, the task policy)
            status = exc.status
            problems = exc.problems or [("job", exc.message)]
    kept = {k: v for k, v in form.items() if k != "csrf"}
    return _new_form(request, session, kept, problems, status)


@router.post("/jobs/{job_id}/delete")
async def delete_job(job_id: str, request: Request, session: Session) -> Response:
    await checked_form(request, session)
    require_write(session)
    await _call(api_routes.delete_job, job_id, request, session.token)
    message = "job deleted: its triggers are gone, its run history stays"
    return answered(request, session, f"{PREFIX}/jobs", message)


@router.post("/jobs/{job_id}/backfill")
async def backfill(job_id: str, request: Request, session: Session) -> Response:
    form = await checked_form(request, session)
    require_write(session)
    back = f"{PREFIX}/jobs/{job_id}"
    body, problems = validated({"from": form.get("from"), "to": form.get("to")}, BackfillIn)
    try:
        if body is None:  # a field missing or not a time: the API's 422 in words
            raise FieldErrors(problems)
        done = await _call(backfill_job, job_id, body, request, session.token)
    except FieldError as exc:
        message = "; ".join(f"{f}: {r}" for f, r in exc.problems)
        return answered(request, session, back, f"backfill refused: {message}")
    message = (
        f"backfill: {done.owed} fires owed, {done.created} runs created, {done.revived} "
        f"revived, {done.existing} existing; the reaper publishes them on its next pass"
    )
    return answered(request, session, back, message)


# -- now, across jobs --------------------------------------------------------------------------


@router.get("/now")
async def now_page(request: Request, session: Reader) -> HTMLResponse:
    view = await _call(views.now_view, engine_of(request), session.token.tenant)
    by_state: dict[str, list[views.NowRun]] = {"claimed": [], "running": [], "retry_scheduled": []}
    for run in view.active:
        by_state.setdefault(run.state, []).append(run)
    return render(
        request,
        "now.html",
        session=session,
        view=view,
        by_state=by_state,
        unfinished=UNFINISHED,
        limit=views.NOW_LIMIT,
    )


async def _bulk(request: Request, session: ConsoleSession) -> tuple[list[str], str]:
    lists = await checked_form_lists(request, session)
    require_write(session)
    ids = list(dict.fromkeys(lists.get("run_id", [])))[:MAX_BULK]
    if not ids:
        raise ConsoleError(422, "run_id: tick at least one run")
    return ids, safe_next(lists.get("next", [None])[-1], f"{PREFIX}/now")


@router.post("/now/cancel")
async def bulk_cancel(request: Request, session: Session) -> Response:
    ids, back = await _bulk(request, session)
    done = finished = 0
    for run_id in ids:
        try:
            await _call(
                cancel_store.run_cancel,
                engine_of(request),
                session.token.tenant,
                run_id,
                session.token.token_id,
            )
            done += 1
        except cancel_store.RunFinished:
            finished += 1
        except ConsoleError as exc:
            if exc.status != 404:
                raise
    message = f"{done} runs cancelled" + (f", {finished} had already finished" if finished else "")
    return answered(request, session, back, message)


@router.post("/now/replay")
async def bulk_replay(request: Request, session: Session) -> Response:
    ids, back = await _bulk(request, session)
    done = skipped = 0
    for run_id in ids:
        try:
            await _call(
                dead_letter_store.dead_letter_replay,
                engine_of(request),
                session.token.tenant,
                run_id,
            )
            done += 1
        except (dead_letter_store.ReplayConflict, RunNotFound):
            skipped += 1
        except ConsoleError as exc:
            if exc.status != 404:
                raise
            skipped += 1
    message = f"{done} runs replayed: the reaper publishes them on its next pass"
    if skipped:
        message += f"; {skipped} were not dead (replayed already?)"
    return answered(request, session, back, message)


# -- the pull queues ---------------------------------------------------------------------------


def _queue_name(queue: str) -> str:
    """A queue name as the API takes it; any other is no queue of this tenant."""
    if not re.fullmatch(QUEUE_PATTERN, queue):
        raise NOT_FOUND
    return queue


@router.get("/queues")
async def queues_page(request: Request, session: Reader) -> HTMLResponse:
    found = await _call(views.queues_overview, engine_of(request), session.token.tenant)
    return render(request, "queues.html", session=session, queues=found)


@router.get("/queues/{queue}")
async def queue_page(queue: str, request: Request, session: Reader) -> HTMLResponse:
    name = _queue_name(queue)
    tenant = session.token.tenant
    overview = next(
        (
            q
            for q in await _call(views.queues_overview, engine_of(request), tenant)
            if q.queue == name
        ),
        None,
    )
    dead = await _call(views.queue_dead_tasks, engine_of(request), tenant, name, 100)
    return render(request, "queue.html", session=session, queue=name, overview=overview, dead=dead)


@router.post("/queues/{queue}/replay")
async def queue_replay(queue: str, request: Request, session: Session) -> Response:
    name = _queue_name(queue)
    lists = await checked_form_lists(request, session)
    require_write(session)
    ids = [i for i in lists.get("task_id", []) if i][:MAX_BULK] or None
    done = await _call(views.queue_replay, engine_of(request), session.token.tenant, name, ids)
    return answered(
        request, session, f"{PREFIX}/queues/{name}", f"{done} dead tasks put back in {name}"
    )


# -- charts ------------------------------------------------------------------------------------


@router.get("/charts")
async def charts_page(
    request: Request, session: Reader, span: Annotated[str, Query(alias="range")] = "1h"
) -> HTMLResponse:
    if span not in RANGES:
        raise ConsoleError(422, f"range: must be one of {', '.join(RANGES)}")
    start, end, step = chart_range(span)
    series = await _call(
        views.run_series,
        engine_of(request),
        session.token.tenant,
        start,
        end,
        step,
        list(PRIORITY_TIERS),
    )
    return render(
        request,
        "charts.html",
        session=session,
        series=series,
        charts=charts_of(series),
        ranges=RANGES,
        chosen=span,
    )
