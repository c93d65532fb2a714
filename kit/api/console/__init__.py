"""The web console: server-rendered pages on the API's port, behind the same tokens.

Plain HTML from Jinja2 templates, one small script (static/console.js: a schedule
preview as you type, confirmations, refreshing a job's runs) and no build step. See
docs/console.md.
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from kit.api.console.act import router as act_router
from kit.api.console.pages import router
from kit.api.console.web import HERE, PREFIX, ConsoleError, LoginRequired, redirect, render


def install(app: FastAPI) -> None:
    app.include_router(act_router)  # first: /jobs/new before /jobs/{job_id}
    app.include_router(router)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=HERE / "static"), name="console-static")

    async def on_login_required(request: Request, exc: LoginRequired) -> Response:
        if request.method == "GET":
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return redirect(f"{PREFIX}/login?{urlencode({'next': target})}")
        return redirect(f"{PREFIX}/login", notice="session_ended")

    async def on_console_error(request: Request, exc: ConsoleError) -> Response:
        if request.url.path == f"{PREFIX}/preview":  # a fragment of the edit form
            return render(request, "preview.html", status_code=exc.status, error=exc.message)
        response = render(request, "error.html", status_code=exc.status, message=exc.message)
        response.headers.update(exc.headers)  # a 429's Retry-After
        return response

    app.add_exception_handler(LoginRequired, on_login_required)
    app.add_exception_handler(ConsoleError, on_console_error)
