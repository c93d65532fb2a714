"""Console clients for the integration tests: a signed-in TestClient per tenant and
scopes (the `browser` fixture, in conftest.py), and the form helpers they use."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html[:500]
    return found.group(1)


def login(client: TestClient, token: str, next_page: str = "/console/jobs") -> TestClient:
    form = client.get("/console/login")
    assert form.status_code == 200
    got = client.post(
        "/console/login",
        data={"csrf": csrf_of(form.text), "token": token, "next": next_page},
        follow_redirects=False,
    )
    assert got.status_code == 303, got.text
    return client
