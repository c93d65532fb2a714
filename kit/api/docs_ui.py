"""The API's own documentation pages, served offline: Swagger UI's files come from the
`swagger-ui-bundle-v2` package (Swagger UI 5, which renders the OpenAPI 3.1 document
FastAPI writes), served by the API itself under /docs/static, so /docs works on a
network without internet. No page loads anything from another origin
(tests/integration/test_docs_offline.py)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

STATIC = "/docs/static"
ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png")


def install(app: FastAPI) -> None:
    """/docs (Swagger UI) with its assets; call on an app made with docs_url=None."""
    app.mount(STATIC, StaticFiles(directory=Path(swagger_ui_path)), name="docs-static")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} · docs",
            swagger_js_url=f"{STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{STATIC}/swagger-ui.css",
            swagger_favicon_url=f"{STATIC}/favicon-32x32.png",
            oauth2_redirect_url="/docs/oauth2-redirect",
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def oauth2_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()
