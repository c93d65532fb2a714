"""Refuse oversized request bodies (413) before they are buffered whole."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kit.api.errors import ApiError, error_response


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await error_response(self._refusal())(scope, receive, send)
                return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # FastAPI re-raises HTTPException from body reading; the handler
                    # renders it in the common error shape.
                    raise HTTPException(413, self._refusal().message)
            return message

        await self.app(scope, counted, send)

    def _refusal(self) -> ApiError:
        return ApiError(413, f"request body is larger than {self.max_bytes} bytes")
