#!/usr/bin/env python3
"""early_notifications: talks before it is spoken to, and asks the client things.

Before the initialize reply it sends notifications/tools/list_changed and a
notifications/message (as server-everything does). When the client sends
notifications/initialized it sends the server-to-client request
{"id":"srv-1","method":"ping"}; the client must answer it.

Tools:
  echo {message}  -> message
  ping_client     sends ping "srv-<n>" (n = 2, 3, ...) BEFORE its own reply,
                  then replies "sent srv-<n>"
  client_responses -> JSON text {"<id>": <client's response message>, ...}
                  of every response the client sent to our requests so far
Knobs (env):
  STUB_PING_AT=initialized (default) | initialize (ping "srv-1" right after
      the two early notifications, before the initialize reply) | never
"""
import itertools
import json
import os

from mcpstub import Server

PING_AT = os.environ.get("STUB_PING_AT", "initialized")
srv = Server("early-notifications")
srv.add_echo()
counter = itertools.count(2)
base_initialize = srv.methods["initialize"]


def initialize(ctx):
    srv.notify("notifications/tools/list_changed")
    srv.notify("notifications/message", {"level": "info", "logger": "early", "data": "before initialize reply"})
    if PING_AT == "initialize":
        srv.request("srv-1", "ping")
    return base_initialize(ctx)


@srv.tool("ping_client", "send a ping request to the client before replying")
def ping_client(args, ctx):
    rid = f"srv-{next(counter)}"
    srv.request(rid, "ping")
    return f"sent {rid}"


srv.methods["initialize"] = initialize
if PING_AT == "initialized":
    srv.notifications["notifications/initialized"] = lambda msg: srv.request("srv-1", "ping")
srv.tool("client_responses", "responses the client sent to our requests")(
    lambda args, ctx: json.dumps({json.loads(k): v for k, v in srv.client_responses.items()}))
srv.run()
