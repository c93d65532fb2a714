"""The http task against a real local HTTP server on 127.0.0.1 (allow-listed
explicitly: by default the SSRF guard refuses loopback)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kit.tasks import RunContext, TaskResult, execute
from kit.tasks.http import EXCERPT_BYTES
from tests.resolver import Resolver

pytestmark = pytest.mark.integration


@dataclass
class Seen:
    path: str
    method: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Server:
    port: int
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(0)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            state.seen.append(Seen(self.path, self.command, dict(self.headers.items()), body))
            if self.path == "/redirect":
                self.send_response(302)
                self.send_header("Location", "/ok")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path == "/slow":
                state.release.wait(30)
            if self.path == "/echo":  # a target that echoes the request's credentials
                echoed = f"denied for {self.headers.get('Authorization')}".encode()
                self.send_response(401)
                self.send_header("Content-Length", str(len(echoed)))
                self.end_headers()
                self.wfile.write(echoed)
                return
            status = 500 if self.path == "/fail" else 200
            payload = b"B" * 100_000 + b"END" if self.path == "/big" else b"hello"
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    state.release.set()
    httpd.shutdown()
    httpd.server_close()


def ctx(timeout_s: float = 10.0, allow: str = "127.0.0.1", **kw: object) -> RunContext:
    return RunContext("run-42", 2, timeout_s, allow_hosts=allow, **kw)  # type: ignore[arg-type]


def test_request_carries_the_idempotency_key(server: Server) -> None:
    spec = {
        "type": "http",
        "method": "POST",
        "url": server.url("/ok?x=1"),
        "headers": {"X-Custom": "yes", "Idempotency-Key": "forged", "Content-Type": "text/plain"},
        "body": "payload",
    }
    result = execute(spec, ctx())
    assert result.ok, result
    assert result.detail == "HTTP 200; body: hello"
    [seen] = server.seen
    assert (seen.method, seen.path, seen.body) == ("POST", "/ok?x=1", b"payload")
    assert seen.headers["Idempotency-Key"] == "run-42"
    assert seen.headers["X-Cronfleet-Run-Id"] == "run-42"
    assert seen.headers["X-Cronfleet-Attempt"] == "2"
    assert seen.headers["X-Custom"] == "yes"
    assert seen.headers["Host"] == f"127.0.0.1:{server.port}"


def test_loopback_is_refused_unless_allow_listed(server: Server) -> None:
    spec = {"type": "http", "method": "GET", "url": server.url("/ok")}
    refused = execute(spec, ctx(allow=""))
    assert not refused.ok and "loopback" in (refused.error or "")
    assert server.seen == []
    assert execute(spec, ctx(allow="127.0.0.0/8")).ok
    assert len(server.seen) == 1


def test_host_name_keeps_its_host_header_while_the_checked_ip_is_dialled(
    server: Server,
) -> None:
    spec = {"type": "http", "method": "GET", "url": server.url("/ok", host="localhost")}
    assert not execute(spec, ctx(allow="")).ok
    result = execute(spec, ctx(allow="localhost"))
    assert result.ok, result
    assert server.seen[-1].headers["Host"] == f"localhost:{server.port}"


class _Seen(BaseHTTPRequestHandler):
    """A target that answers 200 and remembers each request's Host header."""

    seen: list[str]

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Host", ""))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


@pytest.fixture
def two_targets() -> Iterator[tuple[int, dict[str, list[str]]]]:
    """Servers on 127.0.0.2 and 127.0.0.3 at the same port: where a request lands says
    which address was dialled. Yields (port, address -> Host headers seen)."""
    seen: dict[str, list[str]] = {"127.0.0.2": [], "127.0.0.3": []}
    servers: list[ThreadingHTTPServer] = []
    for _ in range(20):  # bounded: a port free on the first address may be taken on the other
        first = ThreadingHTTPServer(
            ("127.0.0.2", 0), type("H2", (_Seen,), {"seen": seen["127.0.0.2"]})
        )
        port = first.server_address[1]
        try:
            second = ThreadingHTTPServer(
                ("127.0.0.3", port), type("H3", (_Seen,), {"seen": seen["127.0.0.3"]})
            )
        except OSError:
            first.server_close()
            continue
        servers = [first, second]
        break
    assert servers, "no port free on both 127.0.0.2 and 127.0.0.3"
    for httpd in servers:
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield port, seen
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def test_the_checked_address_is_dialled_not_a_second_lookup(
    two_targets: tuple[int, dict[str, list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: a name that resolves to one address when the guard looks it up and
    to another the next time must be reached at the first, checked one. The name is
    looked up once; the request lands on 127.0.0.2 with the name as its Host."""
    port, seen = two_targets
    dns = Resolver(socket.getaddrinfo)
    dns.answer("rebind.test", ["127.0.0.2"], ["127.0.0.3"])
    monkeypatch.setattr(socket, "getaddrinfo", dns)
    spec = {"type": "http", "method": "GET", "url": f"http://rebind.test:{port}/ok"}
    result = execute(spec, ctx(allow="127.0.0.0/8"))
    assert result.ok, result
    assert seen == {"127.0.0.2": [f"rebind.test:{port}"], "127.0.0.3": []}
    assert dns.lookups["rebind.test"] == 1


def test_redirects_are_not_followed(server: Server) -> None:
    result = execute({"type": "http", "method": "GET", "url": server.url("/redirect")}, ctx())
    assert not result.ok
    assert result.error == "HTTP 302 redirect to /ok (not followed)"
    assert [s.path for s in server.seen] == ["/redirect"]


def test_server_error_fails(server: Server) -> None:
    result = execute({"type": "http", "method": "DELETE", "url": server.url("/fail")}, ctx())
    assert not result.ok and result.error == "HTTP 500; body: hello"


def test_timeout_fails(server: Server) -> None:
    result = execute({"type": "http", "method": "GET", "url": server.url("/slow")}, ctx(1.0))
    assert not result.ok
    assert result.error == "timed out after 1 s"


def test_cancel_abandons_the_request(server: Server) -> None:
    cancel = threading.Event()
    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    spec = {"type": "http", "method": "GET", "url": server.url("/slow")}
    result = execute(spec, ctx(60.0, cancel=cancel))
    timer.join()
    assert result.error == "cancelled"


def test_body_excerpt_is_bounded(server: Server) -> None:
    result = execute({"type": "http", "method": "GET", "url": server.url("/big")}, ctx())
    assert result.ok
    body = (result.detail or "").split("body: ", 1)[1]
    assert body == "B" * EXCERPT_BYTES


def test_connection_refused_is_a_failure() -> None:
    # A port nothing listens on: bind, take the number, close.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = {"type": "http", "method": "GET", "url": f"http://127.0.0.1:{port}/"}
    result = execute(spec, ctx())
    assert not result.ok and (result.error or "").startswith("request failed: ConnectError")


def test_a_failed_response_echoing_the_authorization_header_is_scrubbed(server: Server) -> None:
    """The error shows the start of the failed response's body, without the token the
    target echoed back (issue 7, item 3): run_task scrubs with the job's secret values."""
    from kit.core.redaction import MASK
    from kit.core.task_policy import TaskPolicy
    from kit.tasks.policy import run_task

    spec = {
        "type": "http",
        "method": "GET",
        "url": server.url("/echo"),
        "headers": {"Authorization": "Bearer tok-very-secret-42"},
    }
    policy = TaskPolicy.parse({"tenants": {"acme": {"http_allow_hosts": ["127.0.0.1"]}}})
    result = run_task(spec, RunContext("run-42", 1, 10.0, tenant="acme"), policy)
    assert not result.ok
    assert result.error == f"HTTP 401; body: denied for {MASK}"
    assert "tok-very-secret-42" not in (result.detail or "")
    assert server.seen[-1].headers["Authorization"] == "Bearer tok-very-secret-42"


def test_the_egress_allow_list_is_per_tenant(server: Server) -> None:
    from kit.core.task_policy import TaskPolicy
    from kit.tasks.policy import run_task

    spec = {"type": "http", "method": "GET", "url": server.url("/ok")}
    policy = TaskPolicy.parse({"tenants": {"acme": {"http_allow_hosts": ["127.0.0.0/8"]}}})
    assert run_task(spec, RunContext("r", 1, 10.0, tenant="acme"), policy).ok
    rival = run_task(spec, RunContext("r", 1, 10.0, tenant="rival"), policy)
    assert not rival.ok and "loopback" in (rival.error or "")
    assert len(server.seen) == 1
    everyone = TaskPolicy.parse({}, http_allow_hosts="127.0.0.1")  # CRONFLEET_HTTP_ALLOW_HOSTS
    assert run_task(spec, RunContext("r", 1, 10.0, tenant="rival"), everyone).ok


def test_tls_is_verified_with_the_shared_context(tmp_path: Path) -> None:
    """The TLS context is built once per process (kit.tasks.http._tls) and still
    verifies: a self-signed server is refused, on the first request and on later ones."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    args = f"req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -keyout {key}"
    subprocess.run(
        ["openssl", *args.split(), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"https://127.0.0.1:{httpd.server_address[1]}/"
        for _ in range(2):
            result = execute({"type": "http", "method": "GET", "url": url}, ctx())
            assert not result.ok
            assert "CERTIFICATE_VERIFY_FAILED" in (result.error or ""), result.error
    finally:
        httpd.shutdown()
        httpd.server_close()


# -- the client's own edges (kit/tasks/http_client.py) ------------------------------------


@dataclass
class RawServer:
    """A TCP server answering each connection with `reply(request_bytes)`, or closing it
    when that returns None; records what it got and how many connections it saw."""

    reply: Any
    port: int = 0
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0


@pytest.fixture
def raw_server() -> Iterator[Callable[[Any], RawServer]]:
    servers: list[socket.socket] = []

    def start(reply: Any) -> RawServer:
        state = RawServer(reply)
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        state.port = listener.getsockname()[1]
        servers.append(listener)

        def serve_one(conn: socket.socket) -> None:
            with conn:
                while True:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        data += chunk
                    state.requests.append(data)
                    answer = state.reply(data)
                    if answer is None:
                        return  # close without answering
                    conn.sendall(answer)
                    if b"Connection: close" in answer:
                        return

        def accept() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                state.connections += 1
                threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        return state

    yield start
    for listener in servers:
        listener.close()


def post(port: int, path: str = "/", **extra: Any) -> dict:
    return {"type": "http", "method": "POST", "url": f"http://127.0.0.1:{port}{path}", **extra}


def test_a_chunked_response_is_read_and_its_excerpt_kept(raw_server: Any) -> None:
    body = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    server = raw_server(lambda _: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    result = execute(post(server.port), ctx())
    assert result.ok and result.detail == "HTTP 200; body: hello world"


def test_a_kept_alive_connection_is_reused_and_one_the_target_closed_is_not(
    raw_server: Any,
) -> None:
    """Runs of one loop share the target's pool: two requests, one connection. When the
    target then closes it (as servers close idle connections), the next request dials
    again rather than writing into the closed one."""
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    closing = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    replies = iter([ok, closing, ok])
    server = raw_server(lambda _: next(replies))

    async def three() -> list[TaskResult]:
        from kit.tasks.http import run_http_async, targets_of

        loop = asyncio.get_running_loop()
        try:
            out = []
            for _ in range(3):
                out.append(await run_http_async(post(server.port), ctx()))
                await asyncio.sleep(0.1)  # the close reaches the loop
            return out
        finally:
            await targets_of(loop).close()

    results = asyncio.run(three())
    assert [r.ok for r in results] == [True, True, True], results
    assert server.connections == 2


def test_a_target_that_closes_without_answering_fails_the_request(raw_server: Any) -> None:
    server = raw_server(lambda _: None)
    result = execute(post(server.port), ctx())
    assert not result.ok
    assert (result.error or "").startswith("request failed: RemoteProtocolError")


def test_headers_past_the_bound_abort_the_request(raw_server: Any) -> None:
    huge = b"X-Big: " + b"a" * 70_000 + b"\r\n"
    server = raw_server(lambda _: b"HTTP/1.1 200 OK\r\n" + huge + b"Content-Length: 0\r\n\r\n")
    result = execute(post(server.port), ctx())
    assert not result.ok and "response headers over" in (result.error or "")


def test_a_job_cannot_set_the_framing_or_inject_a_header(raw_server: Any) -> None:
    server = raw_server(lambda _: b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    framed = {"Transfer-Encoding": "chunked", "Content-Length": "999", "Connection": "close"}
    assert execute(post(server.port, headers=framed, body="{}"), ctx()).ok
    [sent] = server.requests
    head = sent.split(b"\r\n\r\n")[0].lower()
    assert b"transfer-encoding" not in head and b"content-length: 2" in head
    assert b"connection" not in head and b"content-length: 999" not in head
    injected = execute(post(server.port, headers={"X-A": "1\r\nX-Evil: 2"}), ctx())
    assert not injected.ok and (injected.error or "").startswith("task.headers:")
    assert len(server.requests) == 1


def test_a_head_request_reads_no_body_and_credentials_in_the_url_become_basic_auth(
    raw_server: Any,
) -> None:
    server = raw_server(lambda _: b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
    url = f"http://user:pw@127.0.0.1:{server.port}/h"
    assert execute({"type": "http", "method": "HEAD", "url": url}, ctx(5.0)).ok
    head = server.requests[0].split(b"\r\n\r\n")[0]
    assert head.startswith(b"HEAD /h HTTP/1.1") and b"Authorization: Basic dXNlcjpwdw==" in head


def test_tls_is_verified_for_the_urls_name_on_the_checked_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A certificate for `localhost` from a CA the worker trusts: https://localhost passes
    (the pool dials 127.0.0.1, the address the guard checked, and verifies the name);
    the same server reached as https://127.0.0.1 is refused (not its name)."""
    from kit.tasks import http

    def run(command: str) -> None:
        argv = ["openssl", *command.split()]
        subprocess.run(argv, check=True, capture_output=True, cwd=tmp_path)

    run("req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca -keyout ca.key -out ca.pem")
    run("req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout srv.key -out srv.csr")
    (tmp_path / "ext").write_text("subjectAltName=DNS:localhost\n")
    run(
        "x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
        "-extfile ext -out srv.pem"
    )
    trusting = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    monkeypatch.setattr(http, "_tls", lambda: trusting)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(tmp_path / "srv.pem", tmp_path / "srv.key")

    class Ok(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    try:
        named = {"type": "http", "method": "GET", "url": f"https://localhost:{port}/"}
        assert execute(named, ctx(allow="localhost")).ok
        by_ip = {"type": "http", "method": "GET", "url": f"https://127.0.0.1:{port}/"}
        refused = execute(by_ip, ctx())
        assert not refused.ok and "TLSError" in (refused.error or ""), refused.error
    finally:
        httpd.shutdown()
        httpd.server_close()
