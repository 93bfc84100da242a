#!/usr/bin/env python3
"""mrtr_stub: a 2026-07-28 server (stdio) for the client side of multi
round-trip requests (basic/patterns/mrtr), including what the reference
server does not do.

`server/discover` -> supportedVersions ["2026-07-28"], capabilities
{tools, prompts, resources}; `initialize` is still answered (2025-11-25).
Every result carries `resultType`. An `input_required` result is
{"resultType":"input_required","inputRequests":{...},"requestState":S}.

Tools:
  reask {times=2}   asks `times` times, each with `inputRequests`
                    {"confirm": elicitation/create form, "where": roots/list}
                    and a requestState full of characters that break naive
                    re-encoding (quotes, backslashes, U+2028, emoji, a NUL,
                    "\\u00e9"); then completes with structuredContent
                    {"rounds": [{"id", "inputResponses", "requestState",
                    "state_ok", "arguments", "meta_version"}...]}: one entry
                    per request received (the first has no inputResponses).
  sampling          always asks for sampling/createMessage (never declared).
  forever           always asks again (roots/list), new requestState each time.
  state_only        one round with a requestState and no inputRequests.
Prompts: `prompts/get` {name: "confirm"} asks one elicitation, then returns
a user message whose text is the JSON of the answer.
Resources: `resources/read` {uri: "stub://roots"} asks roots/list once, then
returns the roots as JSON text.

Environment: STUB_TTL_MS=N gives `tools/list` results `ttlMs` N (and
`cacheScope` "public"), and the list one more tool, `listing_<n>`, n being
how many times the tools were listed (so each listing is seen); with
STUB_LIST_CHANGED=1 the server declares `tools.listChanged` too (it never
sends the notification).
"""
import json
import os

from mcpstub import RpcError, Server

VERSION = "2026-07-28"
META_VERSION = "io.modelcontextprotocol/protocolVersion"


def state(n):
    return f'state "{n}" \\ \u2028 \U0001F682 \x00 \\u00e9 end'


FORM = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Confirm?",
        "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
    },
}
ROOTS = {"method": "roots/list"}


def complete(result):
    return {"resultType": "complete", **result}


def asking(requests, st=None):
    r = {"resultType": "input_required"}
    if requests is not None:
        r["inputRequests"] = requests
    if st is not None:
        r["requestState"] = st
    return r


class Stub(Server):
    def __init__(self):
        tools = {"listChanged": True} if os.environ.get("STUB_LIST_CHANGED") == "1" else {}
        super().__init__("mrtr-stub", capabilities={"tools": tools, "prompts": {}, "resources": {}})
        self.rounds = []
        self.ttl = os.environ.get("STUB_TTL_MS")
        self.listings = 0
        self.methods.update({
            "server/discover": lambda ctx: complete({
                "supportedVersions": [VERSION],
                "capabilities": self.capabilities,
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "mrtr-stub", "version": "0.1.0"}},
            }),
            "prompts/get": self.get_prompt,
            "resources/read": self.read_resource,
        })

    def call_tool(self, ctx):
        params = ctx.msg.get("params") or {}
        name = params.get("name")
        responses = params.get("inputResponses")
        st = params.get("requestState")
        if name == "reask":
            times = (params.get("arguments") or {}).get("times", 2)
            n = len(self.rounds)
            self.rounds.append({
                "id": ctx.id,
                "inputResponses": responses,
                "requestState": st,
                "state_ok": st == (state(n) if n > 0 else None),
                "arguments": params.get("arguments"),
                "meta_version": (params.get("_meta") or {}).get(META_VERSION),
            })
            if n < times:
                return asking({"confirm": FORM, "where": ROOTS}, state(n + 1))
            rounds, self.rounds = self.rounds, []
            return complete({"content": [{"type": "text", "text": json.dumps(rounds)}],
                             "structuredContent": {"rounds": rounds}})
        if name == "sampling":
            return asking({"llm": {"method": "sampling/createMessage",
                                   "params": {"messages": [], "maxTokens": 10}}})
        if name == "forever":
            n = int(st.split(":")[1]) + 1 if isinstance(st, str) else 1
            return asking({"where": ROOTS}, f"forever:{n}")
        if name == "state_only":
            if st == "only":
                return complete({"content": [{"type": "text", "text": "done"}]})
            return asking(None, "only")
        raise RpcError(-32602, f"Unknown tool: {name}")

    def list_tools(self, ctx):
        names = ["reask", "sampling", "forever", "state_only"]
        result = {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in names]}
        if self.ttl is not None:
            self.listings += 1
            result["tools"].append({"name": f"listing_{self.listings}", "inputSchema": {"type": "object"}})
            result.update({"ttlMs": int(self.ttl), "cacheScope": "public"})
        return complete(result)

    def get_prompt(self, ctx):
        params = ctx.msg.get("params") or {}
        if params.get("name") != "confirm":
            raise RpcError(-32602, "Unknown prompt")
        answer = (params.get("inputResponses") or {}).get("confirm")
        if answer is None:
            return asking({"confirm": FORM})
        return complete({"messages": [{"role": "user", "content": {"type": "text", "text": json.dumps(answer)}}]})

    def read_resource(self, ctx):
        params = ctx.msg.get("params") or {}
        if params.get("uri") != "stub://roots":
            raise RpcError(-32002, "Resource not found")
        answer = (params.get("inputResponses") or {}).get("where")
        if answer is None:
            return asking({"where": ROOTS})
        return complete({"contents": [{"uri": "stub://roots", "mimeType": "application/json",
                                       "text": json.dumps(answer)}]})


Stub().run()
