#!/usr/bin/env python3
"""listen_stub: a 2026-07-28 server (stdio) for the client side of
`subscriptions/listen` (basic/utilities/subscriptions), in the ways the
reference server does not behave.

`server/discover` -> supportedVersions ["2026-07-28"], capabilities
{"tools": {"listChanged": true}}. `tools/list` is counted.

`subscriptions/listen`, by LISTEN_MODE (env):
  end (default)   acknowledges with notifications/subscriptions/acknowledged,
                  then ends the stream after 0.3 s with a result whose _meta
                  carries io.modelcontextprotocol/subscriptionId (as a server
                  that shuts the stream down does)
  unsupported     -32601 Method not found

Tools:
  stats -> JSON {"listens": [params of each subscriptions/listen received],
                 "lists": number of tools/list received}
  echo {message} -> message
"""
import json
import os
import threading

from mcpstub import NO_REPLY, RpcError, Server

VERSION = "2026-07-28"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"


def complete(result):
    return {"resultType": "complete", **result}


srv = Server("listen-stub", capabilities={"tools": {"listChanged": True}})
srv.add_echo()
listens = []
lists = [0]
base_list = srv.list_tools


def list_tools(ctx):
    lists[0] += 1
    return complete(base_list(ctx))


def listen(ctx):
    params = ctx.msg.get("params") or {}
    listens.append(params)
    if os.environ.get("LISTEN_MODE") == "unsupported":
        raise RpcError(-32601, "Method not found")
    id_ = ctx.msg["id"]
    srv.notify("notifications/subscriptions/acknowledged", {"_meta": {SUBSCRIPTION_ID: id_}})
    threading.Timer(0.3, lambda: srv.send(srv.response(
        id_, result=complete({"_meta": {SUBSCRIPTION_ID: id_}})))).start()
    return NO_REPLY


base_call = srv.call_tool
srv.methods.update({
    "tools/call": lambda ctx: complete(base_call(ctx)),
    "server/discover": lambda ctx: complete({
        "supportedVersions": [VERSION],
        "capabilities": srv.capabilities,
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "listen-stub", "version": "0.1.0"}},
    }),
    "tools/list": list_tools,
    "subscriptions/listen": listen,
})
srv.tool("stats", "listen requests and tools/list count so far")(
    lambda args, ctx: json.dumps({"listens": listens, "lists": lists[0]}))
srv.run()
