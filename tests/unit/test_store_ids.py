"""The store takes an id only in its canonical text form (kit.store.db.is_uuid): every
other spelling `uuid.UUID()` accepts is not an id, so it never reaches PostgreSQL, which
refuses some of them with an error instead of finding nothing."""

from __future__ import annotations

import uuid

import pytest

from kit.store.db import is_uuid

CANONICAL = "0f8e4c2a-9d1b-4f6e-8a3c-5b7d9e1f2a4c"


@pytest.mark.parametrize(
    "value",
    [
        f"urn:uuid:{CANONICAL}",
        "{" + CANONICAL + "}",
        CANONICAL.replace("-", ""),
        "0f8e-4c2a9d1b-4f6e8a3c-5b7d-9e1f2a4c",
        CANONICAL + "\n",
        " " + CANONICAL,
        CANONICAL.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")),
        CANONICAL * 2,
        "",
        None,
        7,
    ],
)
def test_only_the_canonical_form_is_an_id(value: object) -> None:
    assert not is_uuid(value)


def test_the_canonical_form_in_either_case_is_an_id() -> None:
    assert is_uuid(CANONICAL) and is_uuid(CANONICAL.upper())
    assert all(is_uuid(str(uuid.uuid4())) for _ in range(100))


def test_uuid_accepts_what_the_store_does_not() -> None:
    """Why not uuid.UUID(): it takes the urn and braces forms (this is the reason)."""
    assert uuid.UUID(f"urn:uuid:{CANONICAL}") == uuid.UUID("{" + CANONICAL + "}")
