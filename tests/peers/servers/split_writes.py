#!/usr/bin/env python3
"""split_writes: every outgoing message is written in tiny chunks with a flush
and a short sleep between them. Cuts are placed right after the lead byte of
EVERY multi-byte UTF-8 character (so each such character is torn apart across
two writes), and the rest is cut into random 1..STUB_CHUNK_MAX byte pieces; the
trailing "\\n" usually arrives in a write of its own or mid-chunk.

Tools:
  echo {message}   -> message unchanged
  unicode          -> UNICODE (emoji, CJK, a check mark; 4-, 3- and 2-byte chars)
  notify_echo {message} -> a notifications/message AND the reply, written as ONE
                      chunked byte stream, so chunks straddle the message boundary
Knobs (env):
  STUB_CHUNK_MAX=n        largest chunk in bytes (default 7)
  STUB_CHUNK_DELAY_MS=n   sleep between chunks (default 1; 0 = flush only)
  STUB_SEED=n             random seed for chunk sizes (default 1)
"""
import random
import time

from mcpstub import NO_REPLY, Server, encode, env_int, text

UNICODE = "🚂🛤️ 中文测试 ✓ 日本語 — café"


class Split(Server):
    rng = random.Random(env_int("STUB_SEED", 1))
    max_chunk = env_int("STUB_CHUNK_MAX", 7)
    delay = env_int("STUB_CHUNK_DELAY_MS", 1) / 1000

    def emit(self, data):
        start = 0
        for cut in sorted({i + 1 for i, b in enumerate(data) if b >= 0xC0} | {len(data)}):
            while start < cut:
                end = min(start + self.rng.randint(1, self.max_chunk), cut)
                super().emit(data[start:end])
                start = end
                time.sleep(self.delay)


srv = Split("split-writes")
srv.add_echo()
srv.tool("unicode", "returns a fixed text full of multi-byte characters")(lambda args, ctx: UNICODE)


@srv.tool("notify_echo", "a notification and the reply in one chunked write", message="string")
def notify_echo(args, ctx):
    note = {"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "logger": "split", "data": UNICODE}}
    with srv.lock:
        srv.emit(encode(note) + encode(srv.response(ctx.id, result=text(str(args.get("message", ""))))))
    return NO_REPLY


srv.run()
