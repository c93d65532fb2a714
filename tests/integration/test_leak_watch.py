"""The session's log watch (tests/integration/leaks.py) finds a planted secret in a
message, in its arguments and in a traceback, and not in the test client's own records.
A watch and markers of this test's own: the session's watch must not see these."""

from __future__ import annotations

import logging

import pytest

from tests.integration.leaks import MARKER_PREFIX, LeakWatch, Planted

pytestmark = pytest.mark.integration


def test_the_watch_finds_a_planted_secret_wherever_a_record_carries_it() -> None:
    planted = Planted()
    watch = LeakWatch(planted)
    logger = logging.getLogger("tests.leak_watch")
    logger.propagate = False  # the session's watch on the root never sees these
    logger.addHandler(watch)
    try:
        header = planted.add("an Authorization header")
        userinfo = planted.add("URL credentials")
        logger.info("sent Bearer %s", header)
        try:
            raise ValueError(f"https://user:{userinfo}@example.org/")
        except ValueError:
            logger.exception("failed")
        logger.info("nothing here: %s", MARKER_PREFIX + "0" * 32)  # not a planted one
        # what the test's own client logged (the request it sent) is not the kit's
        watch.handle(logging.LogRecord("httpx", logging.INFO, __file__, 1, header, None, None))
    finally:
        logger.removeHandler(watch)
        logger.propagate = True
    assert len(watch.hits) == 2, watch.hits
    assert "an Authorization header" in watch.hits[0]
    assert "URL credentials" in watch.hits[1] and "ValueError" in watch.hits[1]
