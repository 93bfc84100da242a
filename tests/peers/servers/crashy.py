#!/usr/bin/env python3
"""crashy: a server that dies, hangs, answers slowly and starts slowly.

Tools:
  crash {code=3, partial=false}  writes "fatal: simulated crash" and
        "STUB-CRASH-MARKER pid=<pid> code=<code>" to stderr, then exits with
        `code` without replying. partial=true first writes half a response line
        (no newline) to stdout.
  hang {block=false}  never replies. The server keeps serving other requests
        (ping, calls, cancellations) unless block=true: then the whole process
        stops reading stdin forever (a wedged server).
  hangs -> how many hang calls arrived so far (a test knows its call is
        running upstream before it cancels it)
  slow {ms=1000}  replies "slept <ms> ms" after ms, in a thread (other requests
        are served meanwhile); after notifications/cancelled for it, no reply
        (unless STUB_IGNORE_CANCEL=1: then it replies late).
  pid   -> the process id as text
  argv  -> the arguments after the script, as a JSON list
  echo {message} -> message
  leak {as="error"} -> the value of API_TOKEN, as a careless server echoes
        it: as="error" in a JSON-RPC error (message and data), "result" in a
        result with isError and in its _meta, "log" in a notifications/message
        sent before the result "logged"
  params -> the tools/call params as received, as JSON text (see
        mcpstub.add_params)
  cancelled_ids -> JSON list of the requestIds of notifications/cancelled
        received so far, exactly as sent (see mcpstub.add_cancelled_ids)
Knobs (env), besides mcpstub's (STUB_CALL_LOG, STUB_IGNORE_CANCEL,
STUB_IGNORE_EOF, STUB_IGNORE_SIGTERM):
  STUB_START_LOG=path      append "<pid> <unix time in s>\\n" to path at start
                           (count starts, measure restart delays)
  STUB_START_DELAY_MS=n    sleep n ms before reading stdin (slow start)
  STUB_EXIT_ON_START=code  after the log/delay, print the crash lines to stderr
                           and exit with `code` before reading anything
  STUB_EXIT_ON_START_IF=path  the same (code 4) when path exists, so a test
                           can make the restarts of a running server fail
  STUB_ECHO_SECRETS=1      at start, write its arguments and the value of
                           API_TOKEN to stderr, as a careless server does
  STUB_ARGV_FILE=path      at start, write the arguments after the script to
                           path, as a JSON list (what `argv` answers, unscrubbed)
"""
import json
import os
import sys
import time

from mcpstub import NO_REPLY, RpcError, Server, env_int


def die(code, partial_id=None):
    if partial_id is not None:
        Server.emit(srv, b'{"jsonrpc":"2.0","id":%s,"result":{"cont' % json.dumps(partial_id).encode())
    sys.stderr.write(f"fatal: simulated crash\nSTUB-CRASH-MARKER pid={os.getpid()} code={code}\n")
    sys.stderr.flush()
    os._exit(code)


srv = Server("crashy")
srv.add_echo()
srv.add_cancelled_ids()
srv.add_params()
srv.tool("pid", "the server's process id")(lambda args, ctx: str(os.getpid()))
srv.tool("argv", "the arguments after the script")(lambda args, ctx: json.dumps(sys.argv[1:]))
srv.tool("crash", "exit with `code` without replying", code="integer", partial="boolean")(
    lambda args, ctx: die(int(args.get("code", 3)), ctx.id if args.get("partial") else None))


@srv.tool("leak", "echo API_TOKEN in an error, a result or a log message", **{"as": "string"})
def leak(args, ctx):
    token = os.environ.get("API_TOKEN", "")
    where = args.get("as", "error")
    if where == "result":
        return {"content": [{"type": "text", "text": f"refused: token {token}"}],
                "isError": True, "_meta": {"token": token}}
    if where == "log":
        srv.notify("notifications/message", {"level": "error", "logger": "leak",
                                             "data": {"token": token}})
        return "logged"
    raise RpcError(-32603, f"invalid token {token}", {"sent": token, "length": len(token)})


HANGS = [0]


@srv.tool("hangs", "how many hang calls arrived so far")
def hangs(args, ctx):
    return str(HANGS[0])


@srv.tool("hang", "never reply", block="boolean")
def hang(args, ctx):
    HANGS[0] += 1
    while args.get("block"):
        time.sleep(3600)
    return NO_REPLY


@srv.tool("slow", "reply after `ms` milliseconds", threaded=True, ms="integer")
def slow(args, ctx):
    ms = int(args.get("ms", 1000))
    return f"slept {ms} ms" if ctx.sleep(ms) else NO_REPLY


if os.environ.get("STUB_START_LOG"):
    with open(os.environ["STUB_START_LOG"], "a") as f:
        f.write(f"{os.getpid()} {time.time():.6f}\n")
time.sleep(env_int("STUB_START_DELAY_MS", 0) / 1000)
if os.environ.get("STUB_ARGV_FILE"):
    with open(os.environ["STUB_ARGV_FILE"], "w") as f:
        json.dump(sys.argv[1:], f)
if os.environ.get("STUB_ECHO_SECRETS"):
    sys.stderr.write(f"usage: unrecognized arguments: {' '.join(sys.argv[1:])}\n")
    sys.stderr.write(f"token is {os.environ.get('API_TOKEN', '')}\n")
    sys.stderr.flush()
if os.environ.get("STUB_EXIT_ON_START"):
    die(int(os.environ["STUB_EXIT_ON_START"]))
if os.environ.get("STUB_EXIT_ON_START_IF") and os.path.exists(os.environ["STUB_EXIT_ON_START_IF"]):
    die(4)
srv.run()
