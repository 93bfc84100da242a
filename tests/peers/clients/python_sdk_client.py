"""A real MCP client (the official Python SDK's `mcp.client.Client`) driving
Switchyard's MCP endpoint, for the control plane's integration tests.

    python_sdk_client.py URL MODE TOOL ARGS_JSON RESOURCE_URI [ASKING_TOOL ASKING_ARGS_JSON ANSWER_JSON]

MODE is the SDK's `mode`: `legacy` (the 2025-11-25 initialize handshake),
`auto` (server/discover, then the era it offers) or `2026-07-28`. The client
lists tools, resources and prompts, calls TOOL with ARGS_JSON and reads
RESOURCE_URI. With ASKING_TOOL it then calls that tool (with ASKING_ARGS_JSON) too, answering every
elicitation with `accept` and the content ANSWER_JSON (the questions it got
are in the output). It prints one JSON object with what it saw (the test
asserts on it). SWITCHYARD_TOKEN, if set, is sent as a bearer token. Errors
go to stderr with exit status 1.
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    url, mode, tool, args_json, uri = sys.argv[1:6]
    asking = sys.argv[6:9]
    token = os.environ.get("SWITCHYARD_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    questions = []

    async def answer(context, params):
        questions.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return types.ElicitResult(action="accept", content=json.loads(asking[2]))

    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, cache=None, elicitation_callback=answer) as client:
            tools = await client.list_tools()
            resources = await client.list_resources()
            prompts = await client.list_prompts()
            called = await client.call_tool(tool, json.loads(args_json))
            read = await client.read_resource(uri)
            out = {
                "tools": [t.name for t in tools.tools],
                "resources": [str(r.uri) for r in resources.resources],
                "nextCursor": resources.next_cursor,
                "prompts": [p.name for p in prompts.prompts],
                "call": called.model_dump(mode="json", by_alias=True, exclude_none=True),
                "read": read.model_dump(mode="json", by_alias=True, exclude_none=True),
            }
            if asking:
                asked = await client.call_tool(asking[0], json.loads(asking[1]))
                out["asked"] = asked.model_dump(mode="json", by_alias=True, exclude_none=True)
                out["questions"] = questions
            print(json.dumps(out))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except BaseException as e:  # noqa: BLE001 - the test shows what failed
        import traceback

        traceback.print_exception(e, file=sys.stderr)
        sys.exit(1)
