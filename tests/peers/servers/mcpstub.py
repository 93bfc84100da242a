"""Shared plumbing for Switchyard's misbehaving MCP test servers (stdlib only).

A `Server` holds a tool registry and speaks the 2025-11-25 handshake:
`server/discover` -> -32601, `initialize`, `notifications/initialized`, `ping`,
`tools/list`, `tools/call`, `notifications/cancelled`; any other request gets
-32601 and unknown notifications are ignored. Ids are echoed as received.

`handle(msg)` is transport-agnostic (http_stub.py uses it); `run()` is the stdio
loop: one JSON message per line on stdin, one per line on stdout. Scripts change
how bytes leave the process by overriding `emit(data)`.

Knobs every server honours (env):
  STUB_CALL_LOG=path      append "<tool name> <request id as JSON>\n" to path for
                          every tools/call, before the tool runs
  STUB_IGNORE_CANCEL=1    record notifications/cancelled (see `add_cancelled_ids`)
                          but answer the request anyway (a late reply)
  STUB_IGNORE_EOF=1       (stdio) keep running after stdin closes
  STUB_IGNORE_SIGTERM=1   (stdio) ignore SIGTERM
"""
import json
import os
import signal
import sys
import threading
import time

PROTOCOL_VERSION = "2025-11-25"
NO_REPLY = object()  # a handler/tool returns this to never answer the request


class RpcError(Exception):
    def __init__(self, code, message, data=None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def env_int(name, default):
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


def key(id_):
    """Hashable identity of a JSON-RPC id: 1 and "1" stay distinct."""
    return json.dumps(id_)


def text(s):
    return {"content": [{"type": "text", "text": s}]}


def encode(obj, **dump_args):
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":"), **dump_args) + "\n").encode()


class Ctx:
    """Per-request context handed to handlers and tools (transports add fields)."""

    def __init__(self, server, msg):
        self.server, self.msg, self.id = server, msg, msg.get("id")

    @property
    def cancelled(self):
        return key(self.id) in self.server.cancelled

    def sleep(self, ms):
        """Sleep ms milliseconds; True if done, False as soon as the request is cancelled."""
        end = time.monotonic() + ms / 1000
        while (left := end - time.monotonic()) > 0:
            if self.cancelled:
                return False
            time.sleep(min(0.01, left))
        return not self.cancelled


class Server:
    def __init__(self, name, capabilities=None, id_last=False):
        self.name, self.id_last = name, id_last
        self.capabilities = {"tools": {"listChanged": True}} if capabilities is None else capabilities
        self.tools = {}  # name -> (fn, descriptor, threaded)
        self.cancelled = set()  # key(requestId) of cancelled requests
        self.cancelled_ids = []  # requestId of every notifications/cancelled, as received
        self.ignore_cancel = os.environ.get("STUB_IGNORE_CANCEL") == "1"
        self.call_log = os.environ.get("STUB_CALL_LOG")
        self.client_responses = {}  # key(id) -> client's reply to our requests
        self.lock = threading.Lock()  # serialises whole messages on stdout
        self.methods = {"initialize": self.initialize, "ping": lambda ctx: {}}
        if "tools" in self.capabilities:
            self.methods.update({"tools/list": self.list_tools, "tools/call": self.call_tool})
        self.notifications = {"notifications/cancelled": self.on_cancelled}

    # ---- registry -------------------------------------------------------------
    def tool(self, name, description="", threaded=False, **props):
        """Decorator registering fn(args, ctx) -> str | result dict | NO_REPLY.
        props map argument names to JSON Schema types; threaded tools run off the
        stdio loop so pings/cancellations are still read while they work."""
        def deco(fn):
            schema = {"type": "object", "properties": {k: {"type": t} for k, t in props.items()}}
            desc = {"name": name, "description": description or name, "inputSchema": schema}
            self.tools[name] = (fn, desc, threaded)
            return fn
        return deco

    def add_echo(self):
        self.tool("echo", "returns `message` unchanged", message="string")(
            lambda args, ctx: str(args.get("message", "")))

    def add_params(self):
        """Tool `params` -> JSON text: the tools/call params as received,
        unknown fields and _meta included."""
        self.tool("params", "the tools/call params as received")(
            lambda args, ctx: json.dumps((ctx.msg.get("params") or {}), ensure_ascii=False))

    def add_cancelled_ids(self):
        """Tool `cancelled_ids` -> JSON text: the requestId of every
        notifications/cancelled received so far, in order, exactly as sent."""
        self.tool("cancelled_ids", "requestIds of the cancellations received so far")(
            lambda args, ctx: json.dumps(self.cancelled_ids))

    # ---- handlers -------------------------------------------------------------
    def initialize(self, ctx):
        self.client_init = ctx.msg.get("params") or {}
        return {"protocolVersion": PROTOCOL_VERSION, "capabilities": self.capabilities,
                "serverInfo": {"name": self.name, "version": "0.1.0"}}

    def list_tools(self, ctx):
        return {"tools": [desc for _, desc, _ in self.tools.values()]}

    def call_tool(self, ctx):
        params = ctx.msg.get("params") or {}
        if self.call_log:
            with open(self.call_log, "a") as f:
                f.write(f"{params.get('name')} {json.dumps(ctx.id)}\n")
        entry = self.tools.get(params.get("name"))
        if entry is None:
            raise RpcError(-32602, f"Unknown tool: {params.get('name')}")
        out = entry[0](params.get("arguments") or {}, ctx)
        return text(out) if isinstance(out, str) else out

    def on_cancelled(self, msg):
        request_id = (msg.get("params") or {}).get("requestId")
        self.cancelled_ids.append(request_id)
        if not self.ignore_cancel:
            self.cancelled.add(key(request_id))

    def handle(self, msg, ctx=None):
        """Process one parsed message; return the response object or None."""
        if not isinstance(msg, dict):
            return self.error(None, -32600, "Invalid Request")
        method = msg.get("method")
        if method is None:  # the client's answer to a request of ours
            if "id" in msg:
                self.client_responses[key(msg["id"])] = msg
            return None
        if "id" not in msg:
            handler = self.notifications.get(method)
            if handler:
                handler(msg)
            return None
        try:
            handler = self.methods.get(method)
            if handler is None:
                raise RpcError(-32601, "Method not found")
            result = handler(ctx or Ctx(self, msg))
        except RpcError as e:
            return self.error(msg["id"], e.code, e.message, e.data)
        except Exception as e:  # a bug in a stub should still produce a reply
            return self.error(msg["id"], -32603, f"Internal error: {e!r}")
        return None if result is NO_REPLY else self.response(msg["id"], result=result)

    # ---- message builders -----------------------------------------------------
    def response(self, id_, **body):
        msg = {"jsonrpc": "2.0"} if self.id_last else {"jsonrpc": "2.0", "id": id_}
        msg.update(body)
        msg["id"] = id_  # no-op position-wise unless id_last
        return msg

    def error(self, id_, code, message, data=None):
        error = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        return self.response(id_, error=error)

    # ---- stdio ----------------------------------------------------------------
    def emit(self, data):
        """Write raw bytes to stdout. Override to misbehave."""
        try:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            os._exit(0)

    def send(self, obj):
        with self.lock:
            self.emit(encode(obj))

    def notify(self, method, params=None):
        self.send({"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})})

    def request(self, id_, method, params=None):
        self.send({"jsonrpc": "2.0", "id": id_, "method": method, **({"params": params} if params is not None else {})})

    def serve(self, msg):
        resp = self.handle(msg)
        if resp is not None and key(resp["id"]) not in self.cancelled:
            self.send(resp)

    def threaded(self, msg):
        if not isinstance(msg, dict) or msg.get("method") != "tools/call":
            return False
        entry = self.tools.get((msg.get("params") or {}).get("name"))
        return bool(entry and entry[2])

    def run(self):
        if os.environ.get("STUB_IGNORE_SIGTERM") == "1":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for line in sys.stdin.buffer:
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                self.send(self.error(None, -32700, "Parse error"))
                continue
            if self.threaded(msg):
                threading.Thread(target=self.serve, args=(msg,), daemon=True).start()
            else:
                self.serve(msg)
        while os.environ.get("STUB_IGNORE_EOF") == "1":
            time.sleep(3600)
