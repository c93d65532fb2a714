"""The API documents itself offline: /docs is Swagger UI from the API's own files (no
CDN), and it renders the API's OpenAPI document in Chromium with every request to
another origin refused."""

from __future__ import annotations

import re
import shutil
import tempfile
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.integration.test_console_browser import CHROMIUM, CHROMIUM_FLAGS

pytestmark = pytest.mark.integration


def test_the_docs_page_names_only_this_origins_files(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(s.startswith("/") for s in sources), sources
    assert "cdn" not in page.text.lower()
    for source in sources:
        assert client.get(source).status_code == 200, source
    assert client.get("/redoc").status_code == 404  # its page would load from a CDN


def test_swagger_ui_renders_with_no_other_origin_reachable(served: str) -> None:
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="cf-chromium-")
    refused: list[str] = []
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS
            )

            def route(r: Any) -> None:
                if r.request.url.startswith(served):
                    r.continue_()
                else:
                    refused.append(r.request.url)
                    r.abort()

            context.route("**/*", route)
            page = context.new_page()
            page.goto(f"{served}/docs")
            page.wait_for_selector(".swagger-ui .info .title", timeout=30_000)
            assert "cronfleet jobs API" in page.inner_text(".swagger-ui .info .title")
            page.locator(".opblock-summary-path", has_text="/v1/jobs").first.wait_for(
                timeout=30_000
            )
            context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert refused == []
