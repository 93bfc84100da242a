#!/usr/bin/env python3
"""oauth_as: a mock OAuth 2.1 authorization server on 127.0.0.1 for the OAuth
tests (stage D). Real HTTP, real PKCE S256, rotating refresh tokens with reuse
detection; no login page: /authorize approves at once (like the conformance
suite's AS). Pair it with http_stub.py's STUB_HTTP_OAUTH_AS (a protected resource
that asks this server's /introspect about every bearer token).

Usage: oauth_as.py [PORT]   (or env OAUTH_AS_PORT; 0/default = free port).
Prints "listening on http://127.0.0.1:PORT" on stdout once ready; the issuer is
exactly that URL (no trailing slash). Nothing ever prints a token or a secret.

Endpoints:
  GET /.well-known/oauth-authorization-server   RFC 8414 metadata: issuer,
        authorization_endpoint (/authorize), token_endpoint (/token),
        registration_endpoint (/register), revocation_endpoint (/revoke),
        introspection_endpoint (/introspect), response_types_supported ["code"],
        grant_types_supported ["authorization_code","refresh_token"],
        code_challenge_methods_supported ["S256"],
        token_endpoint_auth_methods_supported
        ["client_secret_basic","client_secret_post","none"], scopes_supported,
        authorization_response_iss_parameter_supported true.
        Every other /.well-known/ path (openid-configuration...) -> 404.
  POST /register      RFC 7591 DCR, JSON body. `redirect_uris` (non-empty list of
        absolute URIs without fragment) required, else 400 invalid_redirect_uri;
        `token_endpoint_auth_method` client_secret_basic (default) |
        client_secret_post | none (public client: no secret), else 400
        invalid_client_metadata. 201 with a random `client_id`, a random
        `client_secret` (not for "none"), client_id_issued_at,
        client_secret_expires_at 0, and the request's metadata echoed
        (application_type, grant_types, response_types, client_name, scope...).
        Registered grant_types are recorded, not enforced.
  Pre-registered client: env OAUTH_AS_CLIENT_ID + OAUTH_AS_CLIENT_SECRET, a
        confidential client accepting client_secret_basic or client_secret_post
        and any redirect_uri whose host is 127.0.0.1, localhost or [::1].
  GET /authorize      Checks, in order: client_id known and redirect_uri exactly one
        of its registered ones (else 400 text/plain, never a redirect); then
        response_type (missing -> invalid_request, not "code" ->
        unsupported_response_type), code_challenge present and
        code_challenge_method=S256 (else invalid_request), `resource` present
        (one absolute URI without fragment, else invalid_target). Errors after
        the first two checks redirect: redirect_uri?error=..&state=..&iss=..
        Success: 302 to redirect_uri?code=<random>&state=<state>&iss=<issuer>
        (state only if sent; query appended to any query redirect_uri has). The
        code remembers client, redirect_uri, challenge, `scope` (space-separated,
        not checked against scopes_supported) and resource; single use, 60 s.
  POST /token         Form-encoded. Client authentication: HTTP Basic (id and
        secret form-urlencoded before base64, RFC 6749 2.3.1), or client_id +
        client_secret in the body, or client_id alone for a public client.
        Unknown client, missing or wrong secret -> 401 {"error":"invalid_client"}
        (with WWW-Authenticate: Basic when Basic was used). Every answer has
        Cache-Control: no-store. Errors are 400 {"error": ...}.
        grant_type=authorization_code: `code` known, unexpired, issued to this
        client; `redirect_uri` equal to the authorize one; `code_verifier` with
        BASE64URL-NOPAD(SHA256(verifier)) == code_challenge; else invalid_grant.
        `resource` equal to the authorize one, else invalid_target. A failed
        attempt does not consume the code; a second use of a redeemed code is
        invalid_grant and revokes the family it started. Success: 200
        {"access_token","token_type":"Bearer","expires_in":TTL,"refresh_token",
        "scope"} (scope = the requested one, omitted when none was); the refresh
        token starts a new "family".
        grant_type=refresh_token: the token must be the CURRENT one of a
        non-revoked family of this client, else invalid_grant. An older
        (already rotated) token of the family is reuse: the whole family is
        revoked (its access tokens become inactive), reuse_detected counted,
        invalid_grant. `resource` must be present and equal to the family's (else
        invalid_target). `scope`, if sent, must be a subset of the family's (else
        invalid_scope) and becomes this access token's scope. Success: a new
        access token and a new refresh token (the old one is no longer current).
        Any other grant_type -> unsupported_grant_type.
  POST /introspect    RFC 7662, form token= (no client auth). Access token:
        {"active":true,"scope","client_id","exp","iat","aud":<resource>,"iss",
        "token_type":"Bearer"}; a current refresh token: the same with
        "token_type":"refresh_token" and no exp. Else {"active":false} (unknown,
        expired, rotated, or revoked family).
  POST /revoke        RFC 7009, form token= (no client auth): revokes the family of
        that access or refresh token; 200 even for an unknown token.
  GET /_stats         JSON: registrations, authorize (count), token_requests
        {"authorization_code": n, "refresh_token": n} (every request, failed
        ones too), invalid_grant (answers with that error), reuse_detected,
        families (not revoked), last_authorize (query of the last /authorize,
        a list for repeated names), last_registration (the last /register
        body), last_token (form of the last /token with client_secret,
        code_verifier, refresh_token and code values as "***"), token_log (per
        /token request {grant_type, client_id, resource, scope, status,
        auth_method: client_secret_basic | client_secret_post | none}).
  GET /_tokens        JSON {"access": [...], "refresh": [...], "client_secrets":
        [...]}: every token and client secret issued so far (test-only, for
        leak checks: a test searches its logs and answers for them).
  POST /_control      JSON object of knobs to change; answers all knob values.
        Unknown names -> 400. Also {"revoke_all": true}: revoke every family now.

Knobs (POST /_control name, or env OAUTH_AS_<NAME> at start; booleans 1/0):
  token_ttl=3600           access token lifetime in seconds (expires_in)
  refresh_delay_ms=0       a refresh_token grant sleeps this long after rotating
                           (state already changed) and before answering
  fail_refresh={"status":503,"count":N}  the next N refresh_token requests get
                           that status + {"error":"temporarily_unavailable"}
                           before any check (nothing rotates); env "503:N"
  no_rotation=false        refresh answers carry no refresh_token (it stays current)
  no_refresh_tokens=false  no token answer carries a refresh_token
  reject_resource=false    a /authorize or /token carrying `resource` fails with
                           invalid_target, and none is required (Entra ID style)
  default_resource=null    the audience (introspection `aud`) of a grant made
                           without `resource` (with reject_resource)
  omit_pkce_methods=false  metadata without code_challenge_methods_supported
  iss=correct              the redirect's iss: correct | omit | wrong
                           (https://evil.example.com) | slash (issuer + "/")
  scopes_supported=["mcp:read","mcp:write","offline_access"]   (env: space-separated)
  no_registration=false    metadata without registration_endpoint; /register 404
Other env: OAUTH_AS_CLIENT_ID / OAUTH_AS_CLIENT_SECRET (pre-registered client),
  OAUTH_AS_LOG=1 (stderr: method, path without query, status; nothing else).
"""
import base64
import hashlib
import json
import os
import secrets
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CODE_TTL = 60
LOG = os.environ.get("OAUTH_AS_LOG") == "1"
JSON = "application/json"
WRONG_ISSUER = "https://evil.example.com"
SECRET_FIELDS = ("client_secret", "code_verifier", "refresh_token", "code")


def env_bool(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def env_fail_refresh():
    value = os.environ.get("OAUTH_AS_FAIL_REFRESH", "").strip()
    if not value:
        return {"status": 503, "count": 0}
    status, _, count = value.partition(":")
    return {"status": int(status), "count": int(count or 1)}


lock = threading.Lock()
issuer = None  # set at start: "http://127.0.0.1:PORT"
knobs = {
    "token_ttl": int(os.environ.get("OAUTH_AS_TOKEN_TTL") or 3600),
    "refresh_delay_ms": int(os.environ.get("OAUTH_AS_REFRESH_DELAY_MS") or 0),
    "fail_refresh": env_fail_refresh(),
    "no_rotation": env_bool("OAUTH_AS_NO_ROTATION"),
    "no_refresh_tokens": env_bool("OAUTH_AS_NO_REFRESH_TOKENS"),
    "reject_resource": env_bool("OAUTH_AS_REJECT_RESOURCE"),
    "default_resource": os.environ.get("OAUTH_AS_DEFAULT_RESOURCE") or None,
    "omit_pkce_methods": env_bool("OAUTH_AS_OMIT_PKCE_METHODS"),
    "iss": os.environ.get("OAUTH_AS_ISS") or "correct",
    "scopes_supported": (os.environ.get("OAUTH_AS_SCOPES") or "mcp:read mcp:write offline_access").split(),
    "no_registration": env_bool("OAUTH_AS_NO_REGISTRATION"),
}
BOOL_KNOBS = ("no_rotation", "no_refresh_tokens", "reject_resource", "omit_pkce_methods", "no_registration")

clients = {}   # client_id -> {"secret", "redirect_uris", "auth_method", "preregistered", "metadata"}
codes = {}     # code -> {"client_id", "redirect_uri", "challenge", "scope", "resource", "exp", "family"}
families = {}  # family id -> {"client_id", "scope", "resource", "current", "revoked"}
refresh_tokens = {}  # every refresh token ever issued -> family id
access_tokens = {}   # access token -> {"family", "scope", "exp", "iat"}
stats = {"registrations": 0, "authorize": 0,
         "token_requests": {"authorization_code": 0, "refresh_token": 0},
         "invalid_grant": 0, "reuse_detected": 0, "last_authorize": None,
         "last_registration": None, "last_token": None, "token_log": []}

if os.environ.get("OAUTH_AS_CLIENT_ID"):
    clients[os.environ["OAUTH_AS_CLIENT_ID"]] = {
        "secret": os.environ.get("OAUTH_AS_CLIENT_SECRET", ""), "redirect_uris": [],
        "auth_method": "client_secret_basic", "preregistered": True, "metadata": {}}


class OAuthError(Exception):
    def __init__(self, error, status=400, headers=()):
        super().__init__(error)
        self.error, self.status, self.headers = error, status, list(headers)


def s256(verifier):
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest()).rstrip(b"=").decode()


def valid_uri(value):
    """An absolute URI without a fragment (RFC 8707 resource, RFC 7591 redirect_uris)."""
    if not isinstance(value, str) or "#" in value:
        return False
    parts = urllib.parse.urlsplit(value)
    return bool(parts.scheme and parts.netloc)


def loopback_uri(value):
    parts = urllib.parse.urlsplit(value)
    return parts.scheme in ("http", "https") and parts.hostname in ("127.0.0.1", "localhost", "::1")


def single(params, name):
    """The one value of form/query parameter `name` (None if absent; repeated -> OAuthError)."""
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise OAuthError("invalid_request")
    return values[0]


def metadata():
    doc = {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/authorize",
        "token_endpoint": f"{issuer}/token",
        "registration_endpoint": f"{issuer}/register",
        "revocation_endpoint": f"{issuer}/revoke",
        "introspection_endpoint": f"{issuer}/introspect",
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
        "scopes_supported": list(knobs["scopes_supported"]),
        "authorization_response_iss_parameter_supported": True,
    }
    if knobs["omit_pkce_methods"]:
        del doc["code_challenge_methods_supported"]
    if knobs["no_registration"]:
        del doc["registration_endpoint"]
    return doc


def redirect_iss():
    return {"correct": issuer, "omit": None, "wrong": WRONG_ISSUER, "slash": issuer + "/"}.get(knobs["iss"], issuer)


def with_query(uri, params):
    query = urllib.parse.urlencode([(k, v) for k, v in params if v is not None])
    return uri + ("&" if urllib.parse.urlsplit(uri).query else "?") + query


def revoke_family(fid):
    """Caller holds the lock."""
    if fid in families:
        families[fid]["revoked"] = True


def token_answer(fid, scope, new_refresh):
    """Issue an access token (and a refresh token if new_refresh) in family fid. Caller holds the lock."""
    fam = families[fid]
    now = int(time.time())
    ttl = knobs["token_ttl"]
    access = "at_" + secrets.token_urlsafe(32)
    access_tokens[access] = {"family": fid, "scope": scope, "iat": now, "exp": now + ttl}
    body = {"access_token": access, "token_type": "Bearer", "expires_in": ttl}
    if new_refresh and not knobs["no_refresh_tokens"]:
        refresh = "rt_" + secrets.token_urlsafe(32)
        refresh_tokens[refresh] = fid
        fam["current"] = refresh
        body["refresh_token"] = refresh
    if scope:
        body["scope"] = scope
    return body


def grant_authorization_code(form, client_id):
    """Caller holds the lock."""
    code = single(form, "code")
    entry = codes.get(code) if code else None
    if entry is None or entry["client_id"] != client_id:
        raise OAuthError("invalid_grant")
    if entry["family"] is not None:  # a redeemed code used again: revoke what it started
        revoke_family(entry["family"])
        raise OAuthError("invalid_grant")
    if time.time() > entry["exp"]:
        raise OAuthError("invalid_grant")
    if single(form, "redirect_uri") != entry["redirect_uri"]:
        raise OAuthError("invalid_grant")
    verifier = single(form, "code_verifier")
    if not verifier or not verifier.isascii() or not secrets.compare_digest(s256(verifier), entry["challenge"]):
        raise OAuthError("invalid_grant")
    resource = check_resource(form)
    if resource != entry["resource"]:
        raise OAuthError("invalid_target")
    fid = "fam_" + secrets.token_hex(8)
    families[fid] = {"client_id": client_id, "scope": entry["scope"], "current": None, "revoked": False,
                     "resource": entry["resource"] if entry["resource"] is not None else knobs["default_resource"]}
    entry["family"] = fid
    return token_answer(fid, entry["scope"], new_refresh=True)


def grant_refresh_token(form, client_id):
    """Caller holds the lock. Returns the answer body (sleeping is the caller's job)."""
    token = single(form, "refresh_token")
    fid = refresh_tokens.get(token) if token else None
    fam = families.get(fid)
    if fam is None or fam["client_id"] != client_id or fam["revoked"]:
        raise OAuthError("invalid_grant")
    if fam["current"] != token:  # an already rotated token: reuse detection
        fam["revoked"] = True
        stats["reuse_detected"] += 1
        raise OAuthError("invalid_grant")
    resource = check_resource(form)
    if not knobs["reject_resource"] and resource is None:
        raise OAuthError("invalid_target")
    if resource is not None and resource != fam["resource"]:
        raise OAuthError("invalid_target")
    scope = fam["scope"]
    requested = single(form, "scope")
    if requested is not None:
        if not set(requested.split()) <= set(fam["scope"].split()):
            raise OAuthError("invalid_scope")
        scope = requested
    return token_answer(fid, scope, new_refresh=not knobs["no_rotation"])


def check_resource(params):
    """The `resource` parameter, validated; None if absent. Caller holds the lock."""
    resource = single(params, "resource")
    if resource is not None and (knobs["reject_resource"] or not valid_uri(resource)):
        raise OAuthError("invalid_target")
    return resource


def introspect(token):
    """Caller holds the lock."""
    now = int(time.time())
    if token in access_tokens:
        at = access_tokens[token]
        fam = families[at["family"]]
        if fam["revoked"] or now >= at["exp"]:
            return {"active": False}
        doc = {"active": True, "scope": at["scope"], "client_id": fam["client_id"], "exp": at["exp"],
               "iat": at["iat"], "iss": issuer, "token_type": "Bearer"}
    elif token in refresh_tokens:
        fam = families[refresh_tokens[token]]
        if fam["revoked"] or fam["current"] != token:
            return {"active": False}
        doc = {"active": True, "scope": fam["scope"], "client_id": fam["client_id"], "iss": issuer,
               "token_type": "refresh_token"}
    else:
        return {"active": False}
    if fam["resource"] is not None:
        doc["aud"] = fam["resource"]
    return doc


class Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if not isinstance(exc, ConnectionError):  # never a traceback: it could show a token
            sys.stderr.write(f"oauth_as: error {type(exc).__name__}\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # the default logs the query string
        pass

    def reply(self, status, body=b"", ctype=None, headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if ctype:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if LOG:
            sys.stderr.write(f"oauth_as: {self.command} {self.path.split('?')[0]} {status}\n")
            sys.stderr.flush()

    def reply_json(self, status, obj, headers=()):
        self.reply(status, json.dumps(obj).encode(), JSON, headers)

    def text(self, status, message):
        self.reply(status, (message + "\n").encode(), "text/plain; charset=utf-8")

    def body(self):
        length = self.headers.get("Content-Length")
        return self.rfile.read(int(length)) if length else b""

    def form(self):
        try:
            return urllib.parse.parse_qs(self.body().decode("utf-8"), keep_blank_values=True, strict_parsing=False)
        except UnicodeDecodeError:
            return {}

    def dispatch(self, routes):
        path = self.path.split("?")[0]
        try:
            handler = routes.get(path)
            if handler is None:
                if self.command == "POST":
                    self.body()
                return self.text(404, "not found")
            handler()
        except ConnectionError:
            raise
        except Exception as exc:  # a bug here still answers, and shows no token
            sys.stderr.write(f"oauth_as: internal error {type(exc).__name__} on {self.command} {path}\n")
            self.reply_json(500, {"error": "server_error"})

    def do_GET(self):
        self.dispatch({"/.well-known/oauth-authorization-server": self.get_metadata,
                       "/authorize": self.get_authorize, "/_stats": self.get_stats,
                       "/_tokens": self.get_tokens})

    def do_POST(self):
        self.dispatch({"/register": self.post_register, "/token": self.post_token,
                       "/introspect": self.post_introspect, "/revoke": self.post_revoke,
                       "/_control": self.post_control})

    # ---- endpoints ------------------------------------------------------------
    def get_metadata(self):
        with lock:
            doc = metadata()
        self.reply_json(200, doc)

    def get_stats(self):
        with lock:
            doc = dict(stats, families=sum(not f["revoked"] for f in families.values()))
            body = json.dumps(doc).encode()
        self.reply(200, body, JSON)

    def get_tokens(self):
        # Test-only: every token and client secret issued, so a test can
        # search its logs, metrics and answers for them (leak checks).
        with lock:
            doc = {"access": sorted(access_tokens), "refresh": sorted(refresh_tokens),
                   "client_secrets": sorted(c["secret"] for c in clients.values() if c.get("secret"))}
            body = json.dumps(doc).encode()
        self.reply(200, body, JSON)

    def post_register(self):
        raw = self.body()
        with lock:
            disabled = knobs["no_registration"]
        if disabled:
            return self.text(404, "not found")
        try:
            req = json.loads(raw)
            assert isinstance(req, dict)
        except (ValueError, AssertionError):
            return self.reply_json(400, {"error": "invalid_client_metadata", "error_description": "body is not a JSON object"})
        uris = req.get("redirect_uris")
        if not isinstance(uris, list) or not uris or not all(valid_uri(u) for u in uris):
            return self.reply_json(400, {"error": "invalid_redirect_uri",
                                         "error_description": "redirect_uris must be a non-empty list of absolute URIs"})
        method = req.get("token_endpoint_auth_method", "client_secret_basic")
        if method not in ("client_secret_basic", "client_secret_post", "none"):
            return self.reply_json(400, {"error": "invalid_client_metadata",
                                         "error_description": "unsupported token_endpoint_auth_method"})
        client_id = "client_" + secrets.token_hex(12)
        answer = dict(req, client_id=client_id, token_endpoint_auth_method=method,
                      client_id_issued_at=int(time.time()))
        secret = None
        if method != "none":
            secret = secrets.token_urlsafe(32)
            answer.update(client_secret=secret, client_secret_expires_at=0)
        with lock:
            clients[client_id] = {"secret": secret, "redirect_uris": list(uris), "auth_method": method,
                                  "preregistered": False, "metadata": req}
            stats["registrations"] += 1
            stats["last_registration"] = req
        self.reply_json(201, answer, [("Cache-Control", "no-store")])

    def get_authorize(self):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query, keep_blank_values=True)
        with lock:
            stats["authorize"] += 1
            stats["last_authorize"] = {k: v[0] if len(v) == 1 else v for k, v in query.items()}
            problem, location = self.authorize(query)
        if problem:
            return self.text(400, problem)
        self.reply(302, headers=[("Location", location)])

    @staticmethod
    def authorize(query):
        """(400 text, None) or (None, Location) for /authorize. Caller holds the lock."""
        client_ids, redirect_uris = query.get("client_id", []), query.get("redirect_uri", [])
        client = clients.get(client_ids[0]) if len(client_ids) == 1 else None
        if client is None:
            return "invalid_request: unknown client_id", None
        redirect_uri = redirect_uris[0] if len(redirect_uris) == 1 else None
        if redirect_uri is None or not (
                redirect_uri in client["redirect_uris"]
                or (client["preregistered"] and valid_uri(redirect_uri) and loopback_uri(redirect_uri))):
            return "invalid_request: redirect_uri is not registered for this client", None
        state = query.get("state", [None])[0]
        iss = redirect_iss()
        try:
            response_type = single(query, "response_type")
            if response_type is None:
                raise OAuthError("invalid_request")
            if response_type != "code":
                raise OAuthError("unsupported_response_type")
            challenge = single(query, "code_challenge")
            if not challenge or single(query, "code_challenge_method") != "S256":
                raise OAuthError("invalid_request")
            resource = check_resource(query)
            if resource is None and not knobs["reject_resource"]:
                raise OAuthError("invalid_target")
            scope = single(query, "scope") or ""
        except OAuthError as e:
            return None, with_query(redirect_uri, [("error", e.error), ("state", state), ("iss", iss)])
        code = "code_" + secrets.token_urlsafe(24)
        codes[code] = {"client_id": client_ids[0], "redirect_uri": redirect_uri, "challenge": challenge,
                       "scope": " ".join(scope.split()), "resource": resource,
                       "exp": time.time() + CODE_TTL, "family": None}
        return None, with_query(redirect_uri, [("code", code), ("state", state), ("iss", iss)])

    def authenticate(self, form):
        """(client_id, auth_method) of the authenticated client, or OAuthError invalid_client (401)."""
        header = self.headers.get("Authorization", "")
        body_id, body_secret = single(form, "client_id"), single(form, "client_secret")
        if header[:6].lower() == "basic ":
            challenge = [("WWW-Authenticate", 'Basic realm="oauth_as"')]
            try:
                decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
                raw_id, sep, raw_secret = decoded.partition(":")
                assert sep
            except (ValueError, AssertionError):
                raise OAuthError("invalid_client", 401, challenge)
            client_id, secret = urllib.parse.unquote_plus(raw_id), urllib.parse.unquote_plus(raw_secret)
            if body_secret is not None or (body_id is not None and body_id != client_id):
                raise OAuthError("invalid_request")  # two authentication methods at once
            method = "client_secret_basic"
        else:
            challenge = []
            client_id, secret = body_id, body_secret
            method = "client_secret_post" if secret is not None else "none"
        client = clients.get(client_id)
        if client is None:
            raise OAuthError("invalid_client", 401, challenge)
        if client["secret"] is None:  # public client: nothing to check
            return client_id, "none" if method == "client_secret_post" else method
        if secret is None or not secrets.compare_digest(secret.encode(), client["secret"].encode()):
            raise OAuthError("invalid_client", 401, challenge)
        return client_id, method

    def post_token(self):
        form = self.form()
        grant_type = form.get("grant_type", [None])[0]
        masked = {k: ("***" if k in SECRET_FIELDS else (v[0] if len(v) == 1 else v)) for k, v in form.items()}
        entry = {"grant_type": grant_type, "client_id": None, "resource": form.get("resource", [None])[0],
                 "scope": form.get("scope", [None])[0], "status": None, "auth_method": None}
        delay = 0
        with lock:
            stats["last_token"] = masked
            stats["token_log"].append(entry)
            if grant_type in stats["token_requests"]:
                stats["token_requests"][grant_type] += 1
            try:
                fail = knobs["fail_refresh"]
                if grant_type == "refresh_token" and fail["count"] > 0:
                    fail["count"] -= 1
                    raise OAuthError("temporarily_unavailable", fail["status"])
                entry["client_id"], entry["auth_method"] = self.authenticate(form)
                if grant_type == "authorization_code":
                    answer = grant_authorization_code(form, entry["client_id"])
                elif grant_type == "refresh_token":
                    answer = grant_refresh_token(form, entry["client_id"])
                    delay = knobs["refresh_delay_ms"]
                else:
                    raise OAuthError("unsupported_grant_type" if grant_type else "invalid_request")
                status, headers = 200, []
                entry["scope"] = answer.get("scope")
            except OAuthError as e:
                status, headers, answer = e.status, e.headers, {"error": e.error}
                stats["invalid_grant"] += e.error == "invalid_grant"
            entry["status"] = status
        if delay:
            time.sleep(delay / 1000)
        self.reply_json(status, answer, [("Cache-Control", "no-store"), ("Pragma", "no-cache"), *headers])

    def post_introspect(self):
        form = self.form()
        token = form.get("token", [None])[0]
        if token is None:
            return self.reply_json(400, {"error": "invalid_request"})
        with lock:
            doc = introspect(token)
        self.reply_json(200, doc, [("Cache-Control", "no-store")])

    def post_revoke(self):
        form = self.form()
        token = form.get("token", [None])[0]
        if token is None:
            return self.reply_json(400, {"error": "invalid_request"})
        with lock:
            fid = access_tokens.get(token, {}).get("family") or refresh_tokens.get(token)
            revoke_family(fid)
        self.reply(200)

    def post_control(self):
        try:
            req = json.loads(self.body())
            assert isinstance(req, dict)
        except (ValueError, AssertionError):
            return self.reply_json(400, {"error": "body must be a JSON object"})
        unknown = sorted(set(req) - set(knobs) - {"revoke_all"})
        if unknown:
            return self.reply_json(400, {"error": f"unknown knobs: {unknown}"})
        try:
            changes = {}
            for name, value in req.items():
                if name in BOOL_KNOBS or name == "revoke_all":
                    assert isinstance(value, bool), f"{name} must be true or false"
                elif name in ("token_ttl", "refresh_delay_ms"):
                    assert isinstance(value, int) and not isinstance(value, bool) and value >= 0, f"{name} must be an integer >= 0"
                elif name == "fail_refresh":
                    assert isinstance(value, dict) and set(value) <= {"status", "count"}, \
                        'fail_refresh must be {"status": S, "count": N}'
                    value = {"status": int(value.get("status", 503)), "count": int(value.get("count", 1))}
                elif name == "iss":
                    assert value in ("correct", "omit", "wrong", "slash"), "iss must be correct|omit|wrong|slash"
                elif name == "scopes_supported":
                    assert isinstance(value, list) and all(isinstance(s, str) for s in value), \
                        "scopes_supported must be a list of strings"
                elif name == "default_resource":
                    assert value is None or isinstance(value, str), "default_resource must be a string or null"
                changes[name] = value
        except (AssertionError, ValueError, TypeError) as e:
            return self.reply_json(400, {"error": str(e)})
        with lock:
            if changes.pop("revoke_all", False):
                for fam in families.values():
                    fam["revoked"] = True
            knobs.update(changes)
            body = json.dumps(knobs).encode()
        self.reply(200, body, JSON)


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("OAUTH_AS_PORT") or 0)
    httpd = Quiet(("127.0.0.1", port), Handler)
    issuer = f"http://127.0.0.1:{httpd.server_address[1]}"
    print(f"listening on {issuer}", flush=True)
    httpd.serve_forever()
