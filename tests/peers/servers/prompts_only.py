#!/usr/bin/env python3
"""prompts_only: a server WITHOUT the tools capability.

initialize advertises capabilities {"prompts":{},"resources":{}} only.
Answers prompts/list, prompts/get {name}, resources/list, resources/read {uri};
tools/list and tools/call get -32601 Method not found, as from a real server
that has no tools. No knobs.
"""
from mcpstub import RpcError, Server

PROMPT = {"name": "greeting", "description": "says hello",
          "arguments": [{"name": "who", "description": "whom to greet", "required": False}]}
RESOURCE = {"uri": "stub://readme", "name": "readme", "mimeType": "text/plain"}


def get_prompt(ctx):
    params = ctx.msg.get("params") or {}
    if params.get("name") != "greeting":
        raise RpcError(-32602, f"Unknown prompt: {params.get('name')}")
    who = (params.get("arguments") or {}).get("who", "world")
    return {"messages": [{"role": "user", "content": {"type": "text", "text": f"Hello, {who}!"}}]}


def read_resource(ctx):
    uri = (ctx.msg.get("params") or {}).get("uri")
    if uri != RESOURCE["uri"]:
        raise RpcError(-32002, f"Resource not found: {uri}")
    return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": "prompts-only stub"}]}


srv = Server("prompts-only", capabilities={"prompts": {}, "resources": {}})
srv.methods.update({
    "prompts/list": lambda ctx: {"prompts": [PROMPT]},
    "prompts/get": get_prompt,
    "resources/list": lambda ctx: {"resources": [RESOURCE]},
    "resources/read": read_resource,
})
srv.run()
