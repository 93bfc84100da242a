#!/usr/bin/env python3
"""big_messages: replies (and a notification) of any size, with "id" LAST.

Every response object is serialised as {"jsonrpc":..,"result"|"error":..,"id":..}
(the TypeScript SDK's key order), so a client cannot find the id by peeking at
the start of a huge line.

Tools:
  big {bytes=1024}   -> one text content whose UTF-8 text is exactly `bytes`
                        bytes: PATTERN (ASCII + 2/3/4-byte chars) repeated,
                        padded with "x". The whole line is ~100 bytes longer.
  big_notification {bytes=1024} -> first sends a notifications/message whose
                        `data` is such a text, then replies "sent <bytes>".
  echo {message}     -> message (check framing recovers after an oversized line)
Knobs (env):
  STUB_ID_LAST=0     put "id" second instead (default 1 = last)
"""
import os

from mcpstub import Server

PATTERN = "switchyard ✓ é 日本語 🚂 0123456789 | "


def blob(n):
    s = PATTERN * (n // len(PATTERN.encode()))
    return s + "x" * (n - len(s.encode()))


srv = Server("big-messages", id_last=os.environ.get("STUB_ID_LAST", "1") != "0")
srv.add_echo()
srv.tool("big", "text of exactly `bytes` UTF-8 bytes", bytes="integer")(
    lambda args, ctx: blob(int(args.get("bytes", 1024))))


@srv.tool("big_notification", "a notifications/message of `bytes` bytes, then a short reply", bytes="integer")
def big_notification(args, ctx):
    n = int(args.get("bytes", 1024))
    srv.notify("notifications/message", {"level": "info", "logger": "big", "data": blob(n)})
    return f"sent {n}"


srv.run()
