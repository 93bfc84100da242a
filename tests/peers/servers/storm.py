#!/usr/bin/env python3
"""storm: a server that floods the client with notifications/tools/list_changed.

Tools:
  storm {n=10000, ms=1000}  sends `n` notifications/tools/list_changed spread
        evenly over `ms` milliseconds (in bursts, one write per burst), then
        replies "sent <n>" (threaded: tools/list is answered meanwhile)
  list_count -> the number of tools/list requests received so far, as text
  echo {message} -> message
Knobs (env), besides mcpstub's:
  STUB_NOTIFY_ON_LIST=1  answer every tools/list and then send another
                         notifications/tools/list_changed (a server that
                         would make a naive client re-list forever)
  STUB_FAIL_LISTS=N      answer the first N tools/list requests with a
                         JSON-RPC error (-32603) (after the notification
                         of STUB_NOTIFY_ON_LIST)
  STUB_EXIT_ON_LIST=1    exit (status 3) on every tools/list (a server
                         that crashes at each listing)
"""
import json
import os
import threading
import time

from mcpstub import RpcError, Server

srv = Server("storm")
srv.add_echo()
lists = [0]
base_list = srv.list_tools


def list_tools(ctx):
    lists[0] += 1
    if os.environ.get("STUB_EXIT_ON_LIST") == "1":
        os._exit(3)
    if os.environ.get("STUB_NOTIFY_ON_LIST") == "1":
        threading.Timer(0.01, lambda: srv.notify("notifications/tools/list_changed")).start()
    if lists[0] <= int(os.environ.get("STUB_FAIL_LISTS", "0")):
        raise RpcError(-32603, f"tools/list failure {lists[0]} of a flaky server")
    return base_list(ctx)


srv.methods["tools/list"] = list_tools
srv.tool("list_count", "tools/list requests so far")(lambda args, ctx: str(lists[0]))


@srv.tool("storm", "send n list_changed notifications over ms milliseconds", threaded=True, n="integer", ms="integer")
def storm(args, ctx):
    n, ms = int(args.get("n", 10000)), int(args.get("ms", 1000))
    line = (json.dumps({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}) + "\n").encode()
    bursts = max(1, min(n, 100))
    start = time.monotonic()
    sent = 0
    for b in range(bursts):
        count = n * (b + 1) // bursts - sent
        with srv.lock:
            srv.emit(line * count)
        sent += count
        delay = start + ms / 1000 * (b + 1) / bursts - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    return f"sent {sent}"


srv.run()
