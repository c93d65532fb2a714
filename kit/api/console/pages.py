"""The console's pages: jobs (search, pause, resume, run now, edit), a job's runs with a
timeline, the explain view, dead letters with replay, the fleet.

Every page reads and writes through the same store calls as the /v1 API, scoped to
the session's tenant: another tenant's id is a 404 page, as it is a 404 over HTTP.
State changes are POST forms with the session's CSRF token, answered with a redirect
(so a reload does not repeat them) carrying a one-line message.
"""

from __future__ import annotations

import hmac
import inspect
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from kit.api import routes as api_routes
from kit.api.console.edit import form_values, patch_from_form, validated, whole_number
from kit.api.console.timeline import timeline
from kit.api.console.web import (
    LOGIN_CSRF_COOKIE,
    NO_READ,
    PREFIX,
    SESSION_COOKIE,
    ConsoleError,
    answered,
    checked_form,
    checked_inputs,
    current_session,
    new_login_csrf,
    read_form,
    redirect,
    render,
    require_reader,
    require_session,
    require_write,
    safe_next,
    secure_cookie,
    set_session_cookie,
)
from kit.api.errors import ApiError
from kit.api.fleet import fleet_now, in_flight_now, is_operator
from kit.api.job_history import explain_out
from kit.api.models import JobOut, JobPatch, RunOut
from kit.api.run_detail import run_detail_of
from kit.api.schedule_preview import preview
from kit.api.state import engine_of, settings_of
from kit.api.switches import OPERATOR_ONLY, lift_grace_ms
from kit.api.tenancy import limits_of
from kit.api.waiting import load_window, waiting_note
from kit.core.errors import FieldError
from kit.core.leases import BUSY
from kit.core.owed import check_instant
from kit.core.run_state import RunState
from kit.core.schedule import parse_instant
from kit.core.switches import SWITCH_KINDS, check_reason, parse_switch
from kit.core.tenant_figures import WINDOW_S as TENANT_WINDOW_S
from kit.store import audit as audit_store
from kit.store import dead_letters as dead_letter_store
from kit.store import explain as explain_store
from kit.store import jobs as job_store
from kit.store import jobs_list as list_store
from kit.store import run_cancel as cancel_store
from kit.store import runs as run_store
from kit.store import switches as switch_store
from kit.store.console_sessions import ConsoleSession, session_close, session_open
from kit.store.errors import JobNotFound, NameTaken, RunNotFound
from kit.store.notifications import notifications_of_run
from kit.store.tokens import token_verify
from kit.tasks import registry

router = APIRouter(prefix=PREFIX, include_in_schema=False, dependencies=[Depends(checked_inputs)])
Session = Annotated[ConsoleSession, Depends(require_session)]  # an action's: checks its scope
Reader = Annotated[ConsoleSession, Depends(require_reader)]  # a page's: `read`
NOT_FOUND = ConsoleError(404, "no such object for this tenant")
# not finished yet (kit.core.leases.BUSY, and a run held for its second: kit.core.run_state)
UNFINISHED = tuple(sorted({s.value for s in BUSY} | {RunState.claimed.value}))
EXPLAIN_PAGE = 300
TASK_TYPES = registry.names()  # the jobs filter's choices


async def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """A store call, off the event loop (an API route that is async itself is awaited
    here); not-found becomes the console's 404 page."""
    try:
        if inspect.iscoroutinefunction(fn):
            return await fn(*args, **kwargs)
        return await run_in_threadpool(lambda: fn(*args, **kwargs))
    except (JobNotFound, RunNotFound) as exc:
        raise NOT_FOUND from exc
    except ApiError as exc:  # an API route's refusal, as the console's page
        raise ConsoleError(exc.status, exc.message, exc.fields) from exc


# -- login --------------------------------------------------------------------------------


@router.get("")
async def console_home(request: Request) -> Response:
    session = await current_session(request)
    return redirect(f"{PREFIX}/jobs" if session else f"{PREFIX}/login")


@router.get("/login")
def login_form(request: Request, next: str | None = None) -> Response:
    csrf = new_login_csrf()
    response = render(request, "login.html", csrf=csrf, next=safe_next(next), error=None)
    response.set_cookie(
        LOGIN_CSRF_COOKIE,
        csrf,
        max_age=600,
        path=f"{PREFIX}/login",
        httponly=True,
        secure=secure_cookie(request),
        samesite="strict",
    )
    return response


@router.post("/login")
async def login(request: Request) -> Response:
    form = await read_form(request)
    cookie = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    sent = form.get("csrf", "")
    next_page = safe_next(form.get("next"))
    if not cookie or not _equal(cookie, sent):
        return render(
            request,
            "login.html",
            status_code=403,
            csrf=cookie or new_login_csrf(),
            next=next_page,
            error="the login form expired: try again",
        )
    ttl_s = settings_of(request).console_session_ttl_s
    token = form.get("token", "").strip()
    info = await run_in_threadpool(token_verify, engine_of(request), token)
    if info is not None and not info.allows("read"):  # /v1 would refuse it every GET
        return render(
            request, "login.html", status_code=403, csrf=cookie, next=next_page, error=NO_READ
        )
    opened = None
    if info is not None:
        opened = await run_in_threadpool(session_open, engine_of(request), token, ttl_s)
    if opened is None:
        return render(
            request,
            "login.html",
            status_code=401,
            csrf=cookie,
            next=next_page,
            error="unknown or revoked token",
        )
    secret, _session = opened
    response = redirect(next_page)
    set_session_cookie(response, request, secret, ttl_s)
    response.delete_cookie(LOGIN_CSRF_COOKIE, path=f"{PREFIX}/login")
    return response


def _equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


@router.post("/logout")
async def logout(request: Request, session: Session) -> Response:
    await checked_form(request, session)
    await run_in_threadpool(session_close, engine_of(request), request.cookies[SESSION_COOKIE])
    response = redirect(f"{PREFIX}/login", notice="signed_out")
    response.delete_cookie(SESSION_COOKIE, path=PREFIX)
    return response


# -- jobs ---------------------------------------------------------------------------------


@router.get("/jobs")
async def jobs_page(
    request: Request,
    session: Reader,
    name_prefix: str = "",
    paused: str = "",
    task_type: str = "",
    priority: str = "",
    last_status: str = "",
    cursor: str | None = None,
) -> HTMLResponse:
    filters = list_store.JobFilter(
        name_prefix=name_prefix or None,
        paused={"true": True, "false": False}.get(paused),
        task_type=task_type or None,
        priority=priority or None,
        last_status=last_status or None,
        task_types=TASK_TYPES,
    )
    try:
        page = await _call(
            list_store.jobs_list, engine_of(request), session.token.tenant, filters, cursor, 50
        )
        error = None
    except FieldError as exc:
        page, error = list_store.JobListPage([], None, 0, True), f"{exc.field}: {exc.reason}"
    query = {
        "name_prefix": name_prefix,
        "paused": paused,
        "task_type": task_type,
        "priority": priority,
        "last_status": last_status,
    }
    return render(
        request,
        "jobs.html",
        status_code=422 if error else 200,
        session=session,
        jobs=[(JobOut.of(job), last) for job, last in page.jobs],
        page_info=page,
        query=query,
        error=error,
        statuses=(*run_store.RUN_STATES, list_store.NO_RUN),
        task_types=TASK_TYPES,
        here=_here(request),
    )


def _here(request: Request) -> str:
    """This page's path and query (the `next` of forms), without a message key."""
    query = urlencode(
        [(k, v) for k, v in request.query_params.multi_items() if k not in ("flash", "notice")]
    )
    return request.url.path + (f"?{query}" if query else "")


async def _set_paused(request: Request, session: ConsoleSession, job_id: str, paused: bool) -> str:
    """Through the API's own PATCH route, so the console edits exactly as the API does."""
    require_write(session)
    patch = JobPatch.model_validate({"paused": paused})
    job = await _call(api_routes.job_edit, job_id, patch, request, session.token)
    return f"{job.spec.name} {'paused' if paused else 'resumed'}"


@router.post("/jobs/{job_id}/pause")
async def pause_job(job_id: str, request: Request, session: Session) -> Response:
    form = await checked_form(request, session)
    message = await _set_paused(request, session, job_id, True)
    return answered(
        request, session, safe_next(form.get("next"), f"{PREFIX}/jobs/{job_id}"), message
    )


@router.post("/jobs/{job_id}/resume")
async def resume_job(job_id: str, request: Request, session: Session) -> Response:
    form = await checked_form(request, session)
    message = await _set_paused(request, session, job_id, False)
    return answered(
        request, session, safe_next(form.get("next"), f"{PREFIX}/jobs/{job_id}"), message
    )


@router.post("/jobs/{job_id}/run-now")
async def run_now(job_id: str, request: Request, session: Session) -> Response:
    form = await checked_form(request, session)
    require_write(session)
    run = await _call(
        api_routes.run_job_now, job_id, request, Response(), session.token, idempotency_key=None
    )
    message = f"run {run.run_id[:8]} queued; the reaper publishes it on its next pass"
    return answered(
        request, session, safe_next(form.get("next"), f"{PREFIX}/jobs/{job_id}"), message
    )


async def _job_page(
    request: Request,
    session: ConsoleSession,
    job_id: str,
    *,
    edit: dict[str, str] | None = None,
    problems: list[tuple[str, str]] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    tenant = session.token.tenant
    engine = engine_of(request)
    job = JobOut.of(await _call(job_store.job_get, engine, tenant, job_id))
    runs = await _call(run_store.runs_list, engine, tenant, job_id, None, None, 50)
    audit = await _call(audit_store.audit_list, engine, tenant, job_id, None, 20)
    now = datetime.now(UTC)
    original = form_values(job)
    return render(
        request,
        "job.html",
        status_code=status_code,
        session=session,
        job=job,
        runs=[RunOut.of(r) for r in runs.runs],
        unfinished=UNFINISHED,
        timeline=timeline(runs.runs, now),
        audit=audit.entries,
        form={**original, **(edit or {})},
        original=original,
        problems=problems or [],
    )


@router.get("/jobs/{job_id}")
async def job_page(job_id: str, request: Request, session: Reader) -> HTMLResponse:
    return await _job_page(request, session, job_id)


@router.post("/jobs/{job_id}/edit")
async def edit_job(job_id: str, request: Request, session: Session) -> Response:
    form = await checked_form(request, session)
    require_write(session)
    patch, problems = patch_from_form(form)
    if not patch and not problems:
        return answered(request, session, f"{PREFIX}/jobs/{job_id}", "nothing changed")
    model, more = validated(patch) if not problems else (None, [])
    problems += more
    status = 422
    if model is not None:
        try:
            job = await _call(api_routes.job_edit, job_id, model, request, session.token)
            saved = f"saved {job.spec.name} (v{job.version})"
            return answered(request, session, f"{PREFIX}/jobs/{job_id}", saved)
        except FieldError as exc:
            problems.append((exc.field, exc.reason))
        except NameTaken:
            problems.append(("name", "is already used by another job"))
        except ConsoleError as exc:  # the API's refusal (403: a scope, the task policy)
            if exc.status == 404:
                raise
            status = exc.status
            problems += exc.problems or [("job", exc.message)]
    edited = {k: v for k, v in form.items() if not k.startswith(("orig_", "csrf"))}
    return await _job_page(
        request, session, job_id, edit=edited, problems=problems, status_code=status
    )


@router.get("/jobs/{job_id}/explain")
async def explain_page(
    job_id: str,
    request: Request,
    session: Reader,
    start: Annotated[str, Query(alias="from")] = "",
    end: Annotated[str, Query(alias="to")] = "",
) -> HTMLResponse:
    tenant = session.token.tenant
    engine = engine_of(request)
    job = JobOut.of(await _call(job_store.job_get, engine, tenant, job_id))
    limits = limits_of(request, tenant)
    now = datetime.now(UTC)
    error = None
    explained = None
    try:  # by default the last hour and the next few minutes, a page of fires at a time
        end_at = parse_instant(end, "to") if end else now + timedelta(minutes=5)
        start_at = parse_instant(start, "from") if start else end_at - timedelta(minutes=65)
        check_instant(start_at, "from")
        check_instant(end_at, "to")
        done = await _call(
            explain_store.job_explain,
            engine,
            tenant,
            job_id,
            start_at,
            end_at,
            limit=EXPLAIN_PAGE,
            written_ahead_ms=settings_of(request).scan_ahead_ms,
            load_window_ms=load_window(limits),
        )
        explained = explain_out(done, waiting_note(tenant, limits, done.load, done.task_type))
    except FieldError as exc:
        error = f"{exc.field}: {exc.reason}"
    return render(
        request,
        "explain.html",
        status_code=422 if error else 200,
        session=session,
        job=job,
        explained=explained,
        error=error,
        start=start or (explained.start.isoformat() if explained else ""),
        end=end or (explained.end.isoformat() if explained else ""),
    )


@router.get("/runs/{run_id}")
async def run_page(run_id: str, request: Request, session: Reader) -> HTMLResponse:
    """One run: every attempt with its times, worker, lag, outcome and output, its key,
    its fire's explain entry and its failure notifications; cancel or replay it."""
    tenant = session.token.tenant
    engine = engine_of(request)
    run = await _call(run_detail_of, request, tenant, run_id)
    names = await _call(list_store.job_names, engine, tenant, [run.job_id])
    notes = await _call(notifications_of_run, engine, run_id)
    return render(
        request,
        "run.html",
        session=session,
        run=run,
        job_name=names.get(run.job_id),
        notifications=notes,
        unfinished=UNFINISHED,
        window=timedelta(minutes=5),
        output_days=_days(settings_of(request).run_output_retention_s),
    )


def _days(seconds: int) -> str:
    days = seconds / 86_400
    return f"{days:g} days" if days >= 1 else f"{seconds / 3600:g} hours"


@router.post("/runs/{run_id}/cancel")
async def cancel_run(run_id: str, request: Request, session: Session) -> Response:
    form = await checked_form(request, session)
    require_write(session)
    try:
        done = await _call(
            cancel_store.run_cancel,
            engine_of(request),
            session.token.tenant,
            run_id,
            session.token.token_id,
        )
        message = f"run {run_id[:8]} cancelled (was {done.was})"
        back = f"{PREFIX}/jobs/{done.run.job_id}"
    except cancel_store.RunFinished as exc:
        message, back = str(exc), f"{PREFIX}/jobs"
    return answered(request, session, safe_next(form.get("next"), back), message)


# -- dead letters --------------------------------------------------------------------------


@router.get("/dead-letters")
async def dead_letters_page(
    request: Request, session: Reader, cursor: str | None = None
) -> HTMLResponse:
    tenant = session.token.tenant
    engine = engine_of(request)
    try:
        page = await _call(dead_letter_store.dead_letters_list, engine, tenant, None, cursor, 50)
    except FieldError as exc:
        raise ConsoleError(422, f"{exc.field}: {exc.reason}") from exc
    names = await _call(list_store.job_names, engine, tenant, [d.job_id for d in page.dead_letters])
    return render(
        request,
        "dead_letters.html",
        session=session,
        page_info=page,
        names=names,
    )


@router.post("/dead-letters/{run_id}/replay")
async def replay_dead_letter(run_id: str, request: Request, session: Session) -> Response:
    form = await checked_form(request, session)
    require_write(session)
    try:
        await _call(
            dead_letter_store.dead_letter_replay, engine_of(request), session.token.tenant, run_id
        )
        message = f"run {run_id[:8]} replayed: the reaper publishes it on its next pass"
    except dead_letter_store.ReplayConflict as exc:
        message = str(exc)
    return answered(
        request, session, safe_next(form.get("next"), f"{PREFIX}/dead-letters"), message
    )


# -- fleet, preview ------------------------------------------------------------------------


@router.get("/fleet")
async def fleet_page(request: Request, session: Reader) -> HTMLResponse:
    """The operator's fleet-wide view, or this tenant's own runs in flight (as /v1)."""
    if not is_operator(request, session):
        mine = await in_flight_now(request, session.token.tenant)
        return render(request, "in_flight.html", session=session, view=mine)
    view, tiers, error, sampled_at = await fleet_now(request)
    switches = await run_in_threadpool(switch_store.switches_list, engine_of(request))
    return render(
        request,
        "fleet.html",
        session=session,
        view=view,
        tiers=tiers,
        kafka_error=error,
        lag_sampled_at=sampled_at,
        live_nodes=sum(1 for n in view.nodes if n.live),
        live_workers=sum(1 for w in view.workers if w.live),
        tenants_window_s=TENANT_WINDOW_S,
        switches=switches,
        switch_kinds=SWITCH_KINDS,
    )


@router.post("/fleet/switch")
async def fleet_switch(request: Request, session: Session) -> Response:
    """The operator's kill switch from the fleet page: `action` off or on, `kind`,
    `value`, `reason`; the same checks and store calls as /v1/switches."""
    form = await checked_form(request, session)
    require_write(session)
    if not is_operator(request, session):
        raise ConsoleError(403, OPERATOR_ONLY)
    back = f"{PREFIX}/fleet"
    try:
        switch = parse_switch(form.get("kind"), form.get("value"), registry.names())
        reason = check_reason(form.get("reason", ""))
    except FieldError as exc:
        return answered(request, session, back, f"switch refused: {exc.field}: {exc.reason}")
    engine, actor = engine_of(request), session.token.token_id
    if form.get("action") == "on":
        try:
            lifted = await run_in_threadpool(
                switch_store.switch_on,
                engine,
                switch,
                actor,
                lift_grace_ms(settings_of(request)),
                reason,
            )
        except switch_store.SwitchNotOff as exc:
            return answered(request, session, back, str(exc))
        message = (
            f"{switch} on: {len(lifted.kept)} held runs run now, {len(lifted.skipped)} "
            "skipped by their misfire policy"
        )
    else:
        state, _ = await run_in_threadpool(switch_store.switch_off, engine, switch, reason, actor)
        message = f"{switch} off: {state.held} runs held (runs already running go on)"
    return answered(request, session, back, message)


@router.get("/preview")
async def preview_fragment(
    request: Request,
    session: Reader,
    cron: str = "",
    timezone: str = "",
    every_s: str = "",
    anchor: str = "",
    at: str = "",
) -> HTMLResponse:
    """The next fires of what the edit form holds (fetched by console.js as you type); an
    interval's from its anchor, as the scheduler fires it, not from now."""
    data: dict[str, Any] = {}
    try:
        if cron.strip():
            data = {"cron": cron.strip(), "timezone": timezone.strip() or "UTC"}
        elif every_s.strip():
            data = {"every_s": whole_number(every_s, "every_s")}
            if anchor.strip():
                data["anchor"] = anchor.strip()
        elif at.strip():
            data = {"at": at.strip()}
        result, error = preview(data, datetime.now(UTC), 5), None
    except FieldError as exc:  # every field at once (a bad cron and a bad zone)
        result, error = None, "; ".join(f"{f}: {r}" for f, r in exc.problems)
    return render(
        request,
        "preview.html",
        status_code=422 if error else 200,
        session=session,
        result=result,
        error=error,
    )
