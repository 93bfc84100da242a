#!/usr/bin/env python3
"""hostile_server: an MCP server (stdio, 2025-11-25, tests/peers/servers/mcpstub.py)
whose server-provided strings are HTML, for the console's escaping test: the
tool `hostile` has a title and a description holding elements with ids
`injected-title`, `injected-desc` and `injected-img`, which the console must
show as text and never as elements. Calling it answers its `message`.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers", "servers"))
from mcpstub import Server  # noqa: E402

srv = Server("hostile")
srv.tool(
    "hostile",
    '<img src=x id=injected-img onerror="document.title=1"><script id=injected-script>document.title=2</script>'
    "<b id=injected-desc>Bold?</b> & \"quotes\"",
    message="string",
)(lambda args, ctx: str(args.get("message", "")))
fn, desc, threaded = srv.tools["hostile"]
desc["title"] = "<b id=injected-title>Hostile</b>"
srv.run()
