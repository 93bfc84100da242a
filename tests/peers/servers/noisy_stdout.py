#!/usr/bin/env python3
"""noisy_stdout: writes junk that is not JSON-RPC to stdout around real messages.

At startup, before reading stdin, it prints every NOISE line once (a banner,
"Loading...", a bare `[1,2]`, `{"hello":1}`, an empty line, `42`, `null`,
a string, broken JSON, a whitespace-only line). Then before every real message
it writes more noise lines, cycling through the same list. Real messages are
always intact, one per line.

Tools: echo {message} -> message.
Knobs (env):
  STUB_NOISE_PER_MSG=n   noise lines before each real message (default 2; 0 = none)
  STUB_NOISE_START=0     skip the startup burst (default 1)
"""
import itertools
import os

from mcpstub import Server, env_int

NOISE = [
    "=== noisy-stdout MCP server 0.1.0 ===", "Loading...", "[1,2]", '{"hello":1}', "",
    "42", "null", '"just a string"', "{not json at all", "   ", "Ready.",
]


class Noisy(Server):
    per_msg = env_int("STUB_NOISE_PER_MSG", 2)
    cycle = itertools.cycle(NOISE)

    def emit(self, data):
        junk = "".join(next(self.cycle) + "\n" for _ in range(self.per_msg))
        super().emit(junk.encode() + data)


srv = Noisy("noisy-stdout")
srv.add_echo()
if os.environ.get("STUB_NOISE_START", "1") != "0":
    Server.emit(srv, "".join(line + "\n" for line in NOISE).encode())
srv.run()
