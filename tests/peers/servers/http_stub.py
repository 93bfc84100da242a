#!/usr/bin/env python3
"""http_stub: a Streamable HTTP MCP server on 127.0.0.1 (POST /mcp) that mixes
JSON and SSE answers, expires sessions, and can answer with nothing.

Usage: http_stub.py [PORT]   (or env STUB_HTTP_PORT; 0/default = free port).
Prints "listening on http://127.0.0.1:PORT/mcp" on stdout once ready.

Sessions: initialize answers with a random `MCP-Session-Id` header; every other
POST must carry it (400 if missing, 404 if unknown/expired). Notifications and
client responses get an empty 202. GET /mcp: 400 without a session, 404 with an
unknown one, the rest of a stream for a known `Last-Event-ID` (see sse_resume),
else 405. DELETE /mcp -> 200 (and forgets the session). Responses are `application/json; charset=utf-8` unless
stated; SSE is `text/event-stream; charset=utf-8`, chunked, with events
`event: message\\ndata: <json>\\n\\n`.

Tools:
  echo {message}       -> JSON response
  echo_sse {message, multiline=false, note} -> SSE: a `: comment`, a
                          notifications/message event (its data: `note`, or
                          "before echo_sse reply"), then the response;
                          multiline=true pretty-prints the response JSON over
                          several `data:` lines
  slow {ms=1000}       -> JSON response after ms (cancelled: empty SSE stream)
  slow_sse {ms=1000}   -> SSE headers + a notification at once, response after ms
  no_response          -> 200, application/json, EMPTY body
  sse_no_response      -> SSE stream: one notification event, then closes
  expire_session       -> replies normally, then forgets the session: the next
                          request with it gets 404 (client should re-initialize)
  reject_calls {count=1} -> replies normally; the next `count` tools/call POSTs on a
                          known session get 404 and end that session (so a client
                          that re-initializes and retries once sees 404 again)
  sse_resume {message, expire=false} -> SSE: one event `id: <token>-1`, `retry: 10`
                          holding a notification, then the stream ends without the
                          reply; a GET with that `Last-Event-ID` (and the session)
                          replays the rest (`id: <token>-2`, the reply). expire=true
                          forgets the session first, so the resuming GET gets 404
  stats                -> JSON text {"initialize", "requests" (JSON-RPC requests
                          POSTed), "sessions_expired", "http" (all HTTP requests),
                          "rejected_404", "deleted", "cancelled" (requestIds seen),
                          "resumed" (GETs that replayed a stream),
                          "bearer_401" (401s for a missing/invalid OAuth token),
                          "bearer_ok" (requests whose OAuth token passed),
                          "bearer_403" (write_echo calls refused for scope),
                          "calls" ({tool: [request ids]} of tools/call requests that
                          reached the tool, i.e. not rejected)}
  last_headers         -> JSON text {"current": {...}, "previous": {...}}: headers
                          (lower-cased names) of this request and of the one before;
                          with `authorization`, also `authorization-sha256` (its
                          SHA-256, hex): a gateway scrubs the header's secret from
                          the answer, its digest shows which one came
  header_log           -> JSON text: every HTTP request so far, oldest first, as
                          {"verb", "method" (JSON-RPC method, POST only), "headers"}
  write_echo {message} -> like echo, but needs scope mcp:write (only with
                          STUB_HTTP_OAUTH_AS; annotations {"destructiveHint": false})
Knobs (env):
  STUB_HTTP_MODE=json|sse      answer format for everything not listed above (json)
  STUB_HTTP_NOTIFY_STATUS=202|200|204   status for notifications/responses (202)
  STUB_HTTP_AUTH=401|403       every request gets that status (401 adds
                               `WWW-Authenticate: Bearer realm="stub"`)
  STUB_HTTP_BEARER=TOKEN       requests without `Authorization: Bearer TOKEN` get 401
                               (with `WWW-Authenticate: Bearer realm="stub"`)
  STUB_HTTP_QUERY_KEY=KEY      requests to /mcp without `api_key=KEY` in the query get 401
  STUB_HTTP_REDIRECT=URL       every request gets 307 to URL (its log still records it)
  STUB_HTTP_STRICT=1           non-initialize POSTs need MCP-Protocol-Version (else
                               400); POSTs need Accept with both types (else 406)
  STUB_HTTP_LOG=1              log requests to stderr
  STUB_HTTP_HANDSHAKE_404=N    the first N sessions are forgotten as soon as
                               initialize answered: the handshake's next POST
                               (notifications/initialized) gets 404
  STUB_HTTP_OAUTH_AS=ISSUER    an OAuth 2.1 protected resource (stage D) whose
                               authorization server is ISSUER (oauth_as.py's URL);
                               its canonical resource URI is
                               http://127.0.0.1:PORT/mcp. See "OAuth" below.
  STUB_HTTP_OAUTH_SCOPES="mcp:read"   space-separated scopes for the metadata's
                               scopes_supported and the 401 challenge's scope

OAuth (STUB_HTTP_OAUTH_AS set; checked after the knobs above, before sessions):
  GET /.well-known/oauth-protected-resource/mcp -> RFC 9728 metadata
      {"resource": "http://127.0.0.1:PORT/mcp", "authorization_servers": [ISSUER],
       "scopes_supported": STUB_HTTP_OAUTH_SCOPES, "bearer_methods_supported":
       ["header"]} (other verbs 405); the root /.well-known/oauth-protected-resource
      and every other path stay 404.
  Every request to /mcp (POST, GET, DELETE) needs `Authorization: Bearer TOKEN`;
      the stub POSTs token=TOKEN to ISSUER/introspect for every request (no cache).
      No bearer token -> 401 `WWW-Authenticate: Bearer resource_metadata="<metadata
      URL>", scope="<scopes>"`; inactive token, or `aud` not the resource URI ->
      401 with `error="invalid_token", ` first. The AS unreachable or answering
      non-200 -> 503 (not counted as bearer_401).
  tools/call write_echo with a token whose scope lacks mcp:write -> 403
      `WWW-Authenticate: Bearer error="insufficient_scope", scope="<scopes +
      mcp:write>", resource_metadata="<metadata URL>"` (scope is "mcp:read
      mcp:write" with the default scopes); the call does not reach the tool.
"""
import hashlib
import json
import os
import secrets
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from mcpstub import NO_REPLY, Ctx, Server, encode, env_int, text

MODE = os.environ.get("STUB_HTTP_MODE", "json")
NOTIFY_STATUS = env_int("STUB_HTTP_NOTIFY_STATUS", 202)
AUTH = env_int("STUB_HTTP_AUTH", 0)
STRICT = os.environ.get("STUB_HTTP_STRICT") == "1"
BEARER = os.environ.get("STUB_HTTP_BEARER")
REDIRECT = os.environ.get("STUB_HTTP_REDIRECT")
QUERY_KEY = os.environ.get("STUB_HTTP_QUERY_KEY")
OAUTH_AS = os.environ.get("STUB_HTTP_OAUTH_AS") or None
OAUTH_SCOPES = (os.environ.get("STUB_HTTP_OAUTH_SCOPES") or "mcp:read").split()
WRITE_SCOPES = OAUTH_SCOPES + [s for s in ["mcp:write"] if s not in OAUTH_SCOPES]
PRM_PATH = "/.well-known/oauth-protected-resource/mcp"
# No proxy from the environment: the AS is on loopback.
no_proxy_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
JSON = "application/json; charset=utf-8"

# `tools` without `listChanged`: its tool list never changes, so a client
# needs no standalone GET stream for it (the tests count every request).
srv = Server("http-stub", capabilities={"tools": {}})
srv.add_echo()
lock = threading.Lock()
sessions = set()
stats = {"initialize": 0, "requests": 0, "sessions_expired": 0, "http": 0,
         "rejected_404": 0, "deleted": 0, "cancelled": [], "calls": {}, "resumed": 0,
         "bearer_401": 0, "bearer_ok": 0, "bearer_403": 0}
last_headers = {}
header_log = []  # {"verb", "method", "headers"} per HTTP request
reject_calls_left = 0
handshake_404_left = env_int("STUB_HTTP_HANDSHAKE_404", 0)
resumable = {}  # (session, Last-Event-ID) -> messages still to send on a resuming GET


def note(data):
    return {"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "logger": "http-stub", "data": data}}


def on_cancelled(msg):
    srv.on_cancelled(msg)
    with lock:
        stats["cancelled"].append((msg.get("params") or {}).get("requestId"))


srv.notifications["notifications/cancelled"] = on_cancelled


@srv.tool("echo_sse", "echo over SSE after a notification", message="string", multiline="boolean",
          note="string")
def echo_sse(args, ctx):
    h = ctx.http
    h.start_sse()
    h.chunk(b": stub comment\n\n")
    h.event(note(args.get("note", "before echo_sse reply")))
    h.event(srv.response(ctx.id, result=text(str(args.get("message", "")))), multiline=args.get("multiline"))
    h.end_sse()
    return NO_REPLY


@srv.tool("slow", "JSON reply after `ms` milliseconds", ms="integer")
def slow(args, ctx):
    ms = int(args.get("ms", 1000))
    return f"slept {ms} ms" if ctx.sleep(ms) else NO_REPLY


@srv.tool("slow_sse", "SSE headers now, reply after `ms` milliseconds", ms="integer")
def slow_sse(args, ctx):
    ms = int(args.get("ms", 1000))
    ctx.http.start_sse()
    ctx.http.event(note("slow_sse started"))
    if ctx.sleep(ms):
        ctx.http.event(srv.response(ctx.id, result=text(f"slept {ms} ms")))
    ctx.http.end_sse()
    return NO_REPLY


@srv.tool("no_response", "200 application/json with an empty body")
def no_response(args, ctx):
    ctx.http.reply(200, b"", "application/json")
    return NO_REPLY


@srv.tool("sse_no_response", "SSE stream with one notification and no response")
def sse_no_response(args, ctx):
    ctx.http.start_sse()
    ctx.http.event(note("sse_no_response: no reply will follow"))
    ctx.http.end_sse()
    return NO_REPLY


@srv.tool("expire_session", "forget this session after replying")
def expire_session(args, ctx):
    with lock:
        sessions.discard(ctx.session)
        stats["sessions_expired"] += 1
    return "session expired"


@srv.tool("sse_resume", "SSE stream cut before the reply; resume with GET + Last-Event-ID",
          message="string", expire="boolean")
def sse_resume(args, ctx):
    token = secrets.token_hex(4)
    reply = srv.response(ctx.id, result=text(str(args.get("message", ""))))
    with lock:
        resumable[(ctx.session, f"{token}-1")] = (f"{token}-2", reply)
        if args.get("expire"):
            sessions.discard(ctx.session)
            stats["sessions_expired"] += 1
    ctx.http.start_sse()
    ctx.http.event(note("sse_resume: cut before the reply"), id_=f"{token}-1", retry=10)
    ctx.http.end_sse()
    return NO_REPLY


@srv.tool("reject_calls", "404 (ending the session) the next `count` tools/call requests", count="integer")
def reject_calls(args, ctx):
    global reject_calls_left
    with lock:
        reject_calls_left = int(args.get("count", 1))
    return f"rejecting the next {reject_calls_left} tools/call requests"


if OAUTH_AS:
    srv.tool("write_echo", "returns `message` unchanged; needs scope mcp:write", message="string")(
        lambda args, ctx: str(args.get("message", "")))
    srv.tools["write_echo"][1]["annotations"] = {"destructiveHint": False}


def introspect(token):
    """The AS's RFC 7662 answer for token (a dict); raises OSError/ValueError if unreachable."""
    req = urllib.request.Request(OAUTH_AS.rstrip("/") + "/introspect",
                                 data=urllib.parse.urlencode({"token": token}).encode(),
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    with no_proxy_opener.open(req, timeout=10) as resp:
        info = json.loads(resp.read())
    if not isinstance(info, dict):
        raise ValueError("introspection answer is not an object")
    return info


srv.tool("stats", "counters as JSON")(lambda args, ctx: json.dumps(stats))
srv.tool("last_headers", "headers of this and the previous request")(
    lambda args, ctx: json.dumps({"current": ctx.headers, "previous": ctx.prev_headers}))
srv.tool("header_log", "verb, JSON-RPC method and headers of every HTTP request so far")(
    lambda args, ctx: json.dumps(header_log))


class Quiet(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # clients hanging up are normal here
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        if os.environ.get("STUB_HTTP_LOG") == "1":
            super().log_message(fmt, *args)

    # ---- output helpers -------------------------------------------------------
    def reply(self, status, body=b"", ctype=None, headers=()):
        self.responded = True
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if ctype:
            self.send_header("Content-Type", ctype)
        if status != 204:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def fail(self, status, message, id_=None, headers=()):
        self.reply(status, encode(srv.error(id_, -32000, message)), JSON, headers)

    def start_sse(self, headers=()):
        self.responded = True
        self.send_response(200)
        for name, value in [("Content-Type", "text/event-stream; charset=utf-8"),
                            ("Cache-Control", "no-cache"), ("Transfer-Encoding", "chunked"), *headers]:
            self.send_header(name, value)
        self.end_headers()

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def event(self, obj, multiline=False, id_=None, retry=None):
        data = json.dumps(obj, ensure_ascii=False, **({"indent": 2} if multiline else {"separators": (",", ":")}))
        head = (f"id: {id_}\n" if id_ else "") + (f"retry: {retry}\n" if retry else "")
        self.chunk((head + "event: message\n" + "".join(f"data: {line}\n" for line in data.split("\n")) + "\n").encode())

    def end_sse(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # ---- request handling -----------------------------------------------------
    def begin(self):
        """Count, record headers, enforce auth and path; False if already answered."""
        global last_headers
        self.responded = False
        headers = {}
        for name, value in self.headers.items():
            headers[name.lower()] = f"{headers[name.lower()]}, {value}" if name.lower() in headers else value
        if "authorization" in headers:  # tests compare it: a client scrubs the header itself
            headers["authorization-sha256"] = hashlib.sha256(headers["authorization"].encode()).hexdigest()
        with lock:
            stats["http"] += 1
            self.hdrs, self.prev_hdrs, last_headers = headers, last_headers, headers
            self.log_entry = {"verb": self.command, "method": None, "headers": headers}
            header_log.append(self.log_entry)
        if AUTH in (401, 403):
            auth = [("WWW-Authenticate", 'Bearer realm="stub"')] if AUTH == 401 else []
            self.fail(AUTH, "Unauthorized" if AUTH == 401 else "Forbidden", headers=auth)
        elif REDIRECT is not None:
            self.fail(307, "Temporary Redirect", headers=[("Location", REDIRECT)])
        elif BEARER is not None and headers.get("authorization") != f"Bearer {BEARER}":
            self.fail(401, "Unauthorized", headers=[("WWW-Authenticate", 'Bearer realm="stub"')])
        elif QUERY_KEY is not None and QUERY_KEY not in urllib.parse.parse_qs(
                urllib.parse.urlsplit(self.path).query).get("api_key", []):
            self.fail(401, "Unauthorized", headers=[("WWW-Authenticate", 'Bearer realm="stub"')])
        elif OAUTH_AS and self.path.split("?")[0] == PRM_PATH:
            self.protected_resource_metadata()
        elif self.path.split("?")[0] != "/mcp":
            self.fail(404, "Not Found")
        elif OAUTH_AS:
            self.check_bearer()
        return not self.responded

    # ---- OAuth protected resource (STUB_HTTP_OAUTH_AS) ------------------------
    def origin(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def protected_resource_metadata(self):
        if self.command != "GET":
            return self.reply(405, b"", headers=[("Allow", "GET")])
        doc = {"resource": self.origin() + "/mcp", "authorization_servers": [OAUTH_AS],
               "scopes_supported": OAUTH_SCOPES, "bearer_methods_supported": ["header"]}
        self.reply(200, encode(doc), JSON)

    def check_bearer(self):
        """Answer 401/503 unless the request carries a token the AS calls active for us."""
        self.token_scopes = []
        metadata = f'resource_metadata="{self.origin()}{PRM_PATH}", scope="{" ".join(OAUTH_SCOPES)}"'
        scheme, _, token = self.hdrs.get("authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            with lock:
                stats["bearer_401"] += 1
            return self.fail(401, "Unauthorized: no bearer token", headers=[("WWW-Authenticate", f"Bearer {metadata}")])
        try:
            info = introspect(token)
        except (OSError, ValueError) as e:  # HTTPError and URLError are OSErrors
            return self.fail(503, f"Service Unavailable: introspection failed ({type(e).__name__})")
        aud = info.get("aud")
        resource = self.origin() + "/mcp"
        if info.get("active") is not True or not (aud == resource or (isinstance(aud, list) and resource in aud)):
            with lock:
                stats["bearer_401"] += 1
            return self.fail(401, "Unauthorized: invalid token",
                             headers=[("WWW-Authenticate", f'Bearer error="invalid_token", {metadata}')])
        self.token_scopes = str(info.get("scope") or "").split()
        with lock:
            stats["bearer_ok"] += 1

    def do_GET(self):
        if not self.begin():
            return
        sid = self.hdrs.get("mcp-session-id")
        with lock:
            known = sid in sessions
            if sid is not None and not known:
                stats["rejected_404"] += 1
            rest = resumable.pop((sid, self.hdrs.get("last-event-id")), None) if known else None
            stats["resumed"] += rest is not None
        if sid is None:
            return self.fail(400, "Bad Request: missing MCP-Session-Id")
        if not known:
            return self.fail(404, "Session not found")
        if rest is None:
            return self.reply(405, b"", headers=[("Allow", "POST, DELETE")])
        event_id, msg = rest
        self.start_sse()
        self.event(msg, id_=event_id)
        self.end_sse()

    def do_DELETE(self):
        if self.begin():
            with lock:
                if self.hdrs.get("mcp-session-id") in sessions:
                    sessions.discard(self.hdrs["mcp-session-id"])
                    stats["deleted"] += 1
            self.reply(200)

    def do_POST(self):
        length = self.headers.get("Content-Length")
        body = self.rfile.read(int(length)) if length else b""
        if not self.begin():
            return
        if length is None:
            return self.fail(411, "Length Required")
        try:
            msg = json.loads(body)
            assert isinstance(msg, dict)
        except (ValueError, AssertionError):
            return self.reply(400, encode(srv.error(None, -32700, "Parse error")), JSON)
        self.log_entry["method"] = msg.get("method")
        accept = self.hdrs.get("accept", "")
        if STRICT and not ("application/json" in accept and "text/event-stream" in accept):
            return self.fail(406, "Not Acceptable: Accept must list application/json and text/event-stream", msg.get("id"))
        is_request = "method" in msg and "id" in msg
        initialize = is_request and msg["method"] == "initialize"
        sid = self.hdrs.get("mcp-session-id")
        global reject_calls_left, handshake_404_left
        with lock:
            stats["requests"] += is_request
            stats["initialize"] += initialize
            known = sid in sessions
            if initialize:
                sid = secrets.token_hex(16)
                if handshake_404_left > 0:
                    handshake_404_left -= 1
                else:
                    sessions.add(sid)
            elif sid is not None and not known:
                stats["rejected_404"] += 1
            elif known and msg.get("method") == "tools/call" and reject_calls_left > 0:
                reject_calls_left -= 1
                sessions.discard(sid)
                known = False
                stats["rejected_404"] += 1
        if not initialize:
            if sid is None:
                return self.fail(400, "Bad Request: missing MCP-Session-Id", msg.get("id"))
            if not known:
                return self.fail(404, "Session not found", msg.get("id"))
            if STRICT and "mcp-protocol-version" not in self.hdrs:
                return self.fail(400, "Bad Request: missing MCP-Protocol-Version", msg.get("id"))
        if (OAUTH_AS and is_request and msg["method"] == "tools/call"
                and (msg.get("params") or {}).get("name") == "write_echo" and "mcp:write" not in self.token_scopes):
            with lock:
                stats["bearer_403"] += 1
            challenge = (f'Bearer error="insufficient_scope", scope="{" ".join(WRITE_SCOPES)}", '
                         f'resource_metadata="{self.origin()}{PRM_PATH}"')
            return self.fail(403, "Forbidden: insufficient_scope", msg.get("id"), headers=[("WWW-Authenticate", challenge)])
        if is_request and msg["method"] == "tools/call":
            with lock:
                name = str((msg.get("params") or {}).get("name"))
                stats["calls"].setdefault(name, []).append(msg["id"])
        ctx = Ctx(srv, msg)
        ctx.http, ctx.session, ctx.headers, ctx.prev_headers = self, sid, self.hdrs, self.prev_hdrs
        resp = srv.handle(msg, ctx)
        extra = [("MCP-Session-Id", sid)] if initialize else []
        if self.responded:
            return
        if not is_request:
            return self.reply(NOTIFY_STATUS)
        if resp is None:  # e.g. cancelled: close an empty stream
            self.start_sse(extra)
            return self.end_sse()
        if MODE == "sse":
            self.start_sse(extra)
            self.event(resp)
            return self.end_sse()
        self.reply(200, encode(resp), JSON, extra)


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else env_int("STUB_HTTP_PORT", 0)
    httpd = Quiet(("127.0.0.1", port), Handler)
    print(f"listening on http://127.0.0.1:{httpd.server_address[1]}/mcp", flush=True)
    httpd.serve_forever()
