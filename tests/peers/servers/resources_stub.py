#!/usr/bin/env python3
"""resources_stub: resources, templates and prompts where server-everything
has none of the hard cases (stage E of the sidecar).

STUB_ERA=2025 (default): the 2025-11-25 handshake (`server/discover` ->
-32601); capabilities {"tools": {}, "resources": {"listChanged": true},
"prompts": {"listChanged": true}}; list changes are sent on the connection.
STUB_ERA=2026: `server/discover` -> supportedVersions ["2026-07-28"], the
same capabilities, every result with `resultType`; list changes are sent
only on an open `subscriptions/listen` stream that opted in to their kind
(`resourcesListChanged`, `promptsListChanged`), with the stream's
`_meta["io.modelcontextprotocol/subscriptionId"]`; the stream is
acknowledged and held open. No `completions`: `completion/complete` ->
-32601.

Lists (each paginated with an EMPTY-STRING cursor on page 1; any cursor
it did not give -> -32602):
  resources/list           ["" -> "third" -> end] stub://readme (with
                           annotations, icons, _meta and an unknown field),
                           stub://long, "stub://dir/../secret file.txt",
                           stub://gone, then one `stub://added/N` per
                           `change {list: "resources"}`
  resources/templates/list ["" -> end] stub://blob/{bytes}, stub://text/{chars}
  prompts/list             ["" -> end] hello {who}, long, pictures, then one
                           `added-N` per `change {list: "prompts"}`
resources/read {uri}:
  stub://readme            text "read me"
  stub://long              25,000 characters ("é" then "x"), text/markdown
  stub://dir/../secret file.txt  text "secret" (the URI compared byte-exact)
  stub://blob/N            N bytes (the URI in ASCII, then bytes
                           (i * 7 + 3) % 251 repeated), application/pdf,
                           base64; held until STUB_READ_BARRIER reads are in
                           flight at once or 1.5 s passed (the peak is in
                           `stats`); read on a thread of its own
  stub://text/N            N characters of text/plain
  stub://bad-blob          a blob that is not base64
  stub://two               two contents (a text and a blob)
  stub://slow/MS           answers after MS ms (a thread; cancellable)
  stub://error             -32603 "boom" with data {"why": "testing"}
  stub://error/N           -32603 with an N-character message and data
  stub://crash             the process exits (status 3) without answering
  stub://gone              -32002 "Resource not found" (2025-11-25 code)
  https://...              a text naming the URI: the sidecar asks the server
  anything else            -32602 "Resource <uri> not found" (2026-07-28 code)
prompts/get {name, arguments}: hello -> "Hello, <who>!"; long -> an
embedded 25,000-character text resource; pictures -> an image, audio and
a resource_link; unknown -> -32602 "Unknown prompt: <name>".

Tools:
  change {list: "resources"|"prompts"}  adds an entry to the list and sends
                                        its list_changed (2026: on the
                                        listen streams that opted in)
  fail_lists {on}                       while on, the three stage E lists
                                        answer -32603
  stats                                 JSON {"lists": {method: count},
                                        "listens": [params], "reads":
                                        count, "peak_reads": n}
"""
import base64
import json
import os
import threading

from mcpstub import NO_REPLY, RpcError, Server, key

ERA = os.environ.get("STUB_ERA", "2025")
MODERN = ERA == "2026"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
BARRIER = int(os.environ.get("STUB_READ_BARRIER", "1"))
LONG = "é" * 20_000 + "x" * 5_000
PATTERN = bytes((i * 7 + 3) % 251 for i in range(251))


def blob_bytes(uri, n):
    head = uri.encode()
    body = PATTERN * (n // len(PATTERN) + 1)
    return (head + body)[:n]


def complete(result):
    return {"resultType": "complete", **result} if MODERN else result


RESOURCES = [
    {"uri": "stub://readme", "name": "readme", "title": "Read me", "mimeType": "text/plain",
     "size": 7, "annotations": {"audience": ["user"], "priority": 0.5},
     "icons": [{"src": "data:image/png;base64,AAAA", "mimeType": "image/png"}],
     "_meta": {"vendor/x": {"n": [1, 2.5, None]}}, "x-unknown": {"kept": True}},
    {"uri": "stub://long", "name": "long", "mimeType": "text/markdown"},
    {"uri": "stub://dir/../secret file.txt", "name": "../secret file.txt", "mimeType": "text/plain"},
    {"uri": "stub://gone", "name": "gone"},
]
TEMPLATES = [
    {"uriTemplate": "stub://blob/{bytes}", "name": "blob", "mimeType": "application/pdf"},
    {"uriTemplate": "stub://text/{chars}", "name": "text", "mimeType": "text/plain"},
]
PROMPTS = [
    {"name": "hello", "description": "says hello",
     "arguments": [{"name": "who", "required": True}]},
    {"name": "long"},
    {"name": "pictures", "title": "Pictures"},
]


class Stub(Server):
    def __init__(self):
        caps = {"tools": {}, "resources": {"listChanged": True}, "prompts": {"listChanged": True}}
        super().__init__("resources-stub", capabilities=caps)
        self.resources = list(RESOURCES)
        self.prompts = list(PROMPTS)
        self.lists = {}
        self.listens = []  # (id, params) of subscriptions/listen received
        self.failing = False
        self.reads = 0
        self.in_flight = 0
        self.peak = 0
        self.cond = threading.Condition()
        self.methods.update({
            "resources/list": self.paged("resources/list", "resources", lambda: self.resources, ["", "third"]),
            "resources/templates/list": self.paged("resources/templates/list", "resourceTemplates", lambda: TEMPLATES, [""]),
            "prompts/list": self.paged("prompts/list", "prompts", lambda: self.prompts, [""]),
            "resources/read": self.read,
            "prompts/get": self.get_prompt,
        })
        if MODERN:
            self.methods["server/discover"] = lambda ctx: complete({
                "supportedVersions": ["2026-07-28"],
                "capabilities": self.capabilities,
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "resources-stub", "version": "0.1.0"}},
            })
            self.methods["subscriptions/listen"] = self.listen
        base_call, base_list = self.call_tool, self.list_tools
        self.methods["tools/call"] = lambda ctx: complete(base_call(ctx))
        self.methods["tools/list"] = lambda ctx: self.count("tools/list") or complete(base_list(ctx))
        self.tool("change", "adds a resource or prompt and says so", list="string")(self.change)
        self.tool("fail_lists", "makes the stage E lists fail", on="boolean")(self.fail_lists)
        self.tool("stats", "counters")(lambda args, ctx: json.dumps({
            "lists": self.lists, "listens": [p for _, p in self.listens],
            "reads": self.reads, "peak_reads": self.peak}))

    def count(self, method):
        self.lists[method] = self.lists.get(method, 0) + 1

    # ---- lists ---------------------------------------------------------------
    def paged(self, method, field, entries, cursors):
        """Pages of the list: page 1 without a cursor, then one per cursor
        in `cursors`; the entries split evenly, the rest on the last."""
        def handler(ctx):
            self.count(method)
            if self.failing:
                raise RpcError(-32603, f"{method} is failing")
            params = ctx.msg.get("params") or {}
            items = entries()
            pages = len(cursors) + 1
            if "cursor" not in params:
                page = 0
            elif params["cursor"] in cursors:
                page = cursors.index(params["cursor"]) + 1
            else:
                raise RpcError(-32602, f"invalid cursor {params['cursor']!r}")
            per = max(1, len(items) // pages)
            chunk = items[page * per:] if page == pages - 1 else items[page * per:(page + 1) * per]
            result = {field: chunk}
            if page < len(cursors):
                result["nextCursor"] = cursors[page]
            return complete(result)
        return handler

    def change(self, args, ctx):
        which = args.get("list")
        if which == "resources":
            n = len(self.resources) - len(RESOURCES) + 1
            self.resources.append({"uri": f"stub://added/{n}", "name": f"added {n}"})
        elif which == "prompts":
            n = len(self.prompts) - len(PROMPTS) + 1
            self.prompts.append({"name": f"added-{n}"})
        else:
            raise RpcError(-32602, f"unknown list {which!r}")
        method = f"notifications/{which}/list_changed"
        if not MODERN:
            self.notify(method)
            return "changed"
        opt_in = f"{which}ListChanged"
        sent = 0
        for id_, params in self.listens:
            if key(id_) in self.cancelled:
                continue
            if (params.get("notifications") or {}).get(opt_in) is True:
                self.notify(method, {"_meta": {SUBSCRIPTION_ID: id_}})
                sent += 1
        return f"changed; told {sent} stream(s)"

    def fail_lists(self, args, ctx):
        self.failing = bool(args.get("on"))
        return "failing" if self.failing else "working"

    def listen(self, ctx):
        params = ctx.msg.get("params") or {}
        self.listens.append((ctx.id, params))
        self.notify("notifications/subscriptions/acknowledged", {"_meta": {SUBSCRIPTION_ID: ctx.id}})
        return NO_REPLY

    # ---- reads and prompts ----------------------------------------------------
    def threaded(self, msg):
        if isinstance(msg, dict) and msg.get("method") == "resources/read":
            uri = (msg.get("params") or {}).get("uri", "")
            if isinstance(uri, str) and (uri.startswith("stub://blob/") or uri.startswith("stub://slow/")):
                return True
        return super().threaded(msg)

    def read(self, ctx):
        params = ctx.msg.get("params") or {}
        uri = params.get("uri")
        self.reads += 1

        def text(t, mime="text/plain"):
            return complete({"contents": [{"uri": uri, "mimeType": mime, "text": t}]})

        if uri == "stub://readme":
            return text("read me")
        if uri == "stub://long":
            return text(LONG, "text/markdown")
        if uri == "stub://dir/../secret file.txt":
            return text("secret")
        if isinstance(uri, str) and uri.startswith("stub://blob/"):
            n = int(uri.rsplit("/", 1)[1])
            with self.cond:
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
                self.cond.notify_all()
                self.cond.wait_for(lambda: self.in_flight >= BARRIER, timeout=1.5)
            data = base64.b64encode(blob_bytes(uri, n)).decode()
            with self.cond:
                self.in_flight -= 1
            return complete({"contents": [{"uri": uri, "mimeType": "application/pdf", "blob": data}]})
        if isinstance(uri, str) and uri.startswith("stub://text/"):
            return text("t" * int(uri.rsplit("/", 1)[1]))
        if uri == "stub://bad-blob":
            return complete({"contents": [{"uri": uri, "blob": "this is not base64!"}]})
        if uri == "stub://two":
            return complete({"contents": [
                {"uri": "stub://two/a.txt", "mimeType": "text/plain", "text": "first", "_meta": {"part": 1}},
                {"uri": "stub://two/b.png", "mimeType": "image/png", "blob": "iVBORw0KGgo="},
            ]})
        if isinstance(uri, str) and uri.startswith("stub://slow/"):
            if not ctx.sleep(int(uri.rsplit("/", 1)[1])):
                return NO_REPLY
            return text("slow")
        if uri == "stub://crash":
            os._exit(3)
        if uri == "stub://gone":
            raise RpcError(-32002, "Resource not found")
        if isinstance(uri, str) and uri.startswith("https://"):
            return text(f"served by the stub for {uri}")
        raise RpcError(-32602, f"Resource {uri} not found")

    def get_prompt(self, ctx):
        params = ctx.msg.get("params") or {}
        name = params.get("name")
        args = params.get("arguments") or {}
        if name == "hello":
            if "who" not in args:
                raise RpcError(-32602, "Missing required argument: who")
            return complete({"description": "says hello", "messages": [
                {"role": "user", "content": {"type": "text", "text": f"Hello, {args['who']}!"}}]})
        if name == "long":
            return complete({"messages": [{"role": "user", "content": {
                "type": "resource", "resource": {"uri": "stub://long", "mimeType": "text/markdown", "text": LONG}}}]})
        if name == "pictures":
            return complete({"messages": [
                {"role": "user", "content": {"type": "text", "text": "Look:"}},
                {"role": "user", "content": {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}},
                {"role": "assistant", "content": {"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="}},
                {"role": "user", "content": {"type": "resource_link", "uri": "https://example.com/doc.pdf",
                                             "name": "doc", "mimeType": "application/pdf"}},
            ]})
        raise RpcError(-32602, f"Unknown prompt: {name}")

    def handle(self, msg, ctx=None):
        # An error with `data` (mcpstub's RpcError carries code and message).
        if isinstance(msg, dict) and msg.get("method") == "resources/read" \
                and (msg.get("params") or {}).get("uri") == "stub://error":
            self.reads += 1
            return self.response(msg["id"], error={"code": -32603, "message": "boom", "data": {"why": "testing"}})
        uri = (msg.get("params") or {}).get("uri") if isinstance(msg, dict) else None
        if msg.get("method") == "resources/read" and isinstance(uri, str) \
                and uri.startswith("stub://error/"):
            self.reads += 1
            n = int(uri.rsplit("/", 1)[1])
            return self.response(msg["id"], error={"code": -32603, "message": "e" * n, "data": {"long": "d" * n}})
        return super().handle(msg, ctx)


Stub().run()
