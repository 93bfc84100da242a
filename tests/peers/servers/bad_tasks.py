#!/usr/bin/env python3
"""bad_tasks: an MCP server (stdio) whose tasks misbehave, for the sidecar's
task client (stage B).

STUB_ERA=2025 (default): 2025-11-25, `initialize`, capabilities
{tools, tasks: {requests: {tools: {call: {}}}, cancel: {}}}; a task is created
when `tools/call` carries `task`, answered `{task: {...}}`.
STUB_ERA=2026: 2026-07-28, `server/discover` advertises
`extensions["io.modelcontextprotocol/tasks"]`; a task answer is
`{resultType: "task", taskId, status, ...}` and `tasks/get` carries
`inputRequests` / `result` inline.

Tools (all `execution.taskSupport: "required"`, except `stats`):
  bad_create {variant}  the CreateTaskResult is malformed: `no_id` (no taskId),
                        `id_number` (taskId 5), `empty_id` (""), `huge_id`
                        (100,000 characters), `unknown_status` (valid taskId
                        "t-unknown", status "running")
  bad_poll {variant}    a well-formed task ("t-<n>", working, pollInterval
                        100 ms); then `tasks/get` misbehaves:
                        `other_id`   answers about task "t-other", completed
                                     (its `tasks/result` is "SECRET of t-other")
                        `unknown_status` status "sleeping", forever
                        `bad_inputs` (2026) input_required with
                                     inputRequests "please" (not an object)
                        `ask_forever` (2026) input_required with a new
                                     elicitation key on every poll
                        `big_result` completed; `tasks/result` (2025) or the
                                     inline result (2026) is a text of
                                     `bytes` (default 9,000,000) bytes
                        `big_status` working, statusMessage of `bytes` bytes,
                                     then completed after `polls` (default 3)
                                     polls with "done"
  stats                 JSON {"cancelled": [taskId...], "gets": {taskId: n}}
Unknown tasks -> -32602 "task not found".
"""
import json
import os

from mcpstub import RpcError, Server

ERA = os.environ.get("STUB_ERA", "2025")
MODERN = "2026-07-28"
EXT = "io.modelcontextprotocol/tasks"


def text(s):
    return {"content": [{"type": "text", "text": s}]}


class Stub(Server):
    def __init__(self):
        if ERA == "2026":
            caps = {"tools": {}, "extensions": {EXT: {}}}
        else:
            caps = {"tools": {}, "tasks": {"requests": {"tools": {"call": {}}}, "cancel": {}}}
        super().__init__("bad-tasks", capabilities=caps)
        self.tasks = {}  # taskId -> {"variant", "args", "gets"}
        self.cancelled_tasks = []
        self.n = 0
        self.methods.update({
            "tasks/get": self.get_task,
            "tasks/result": self.task_result,
            "tasks/cancel": self.cancel_task,
            "tasks/update": lambda ctx: {},
        })
        if ERA == "2026":
            self.methods["server/discover"] = lambda ctx: {
                "resultType": "complete",
                "supportedVersions": [MODERN],
                "capabilities": self.capabilities,
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "bad-tasks", "version": "0.1.0"}},
            }

    def list_tools(self, ctx):
        tools = [{"name": n, "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}}
                 for n in ("bad_create", "bad_poll")]
        tools.append({"name": "stats", "inputSchema": {"type": "object"}})
        out = {"tools": tools}
        if ERA == "2026":
            out["resultType"] = "complete"
        return out

    def task_answer(self, task, meta=None):
        if ERA == "2026":
            out = {"resultType": "task", **task}
        else:
            out = {"task": task}
        if meta:
            out["_meta"] = meta
        return out

    def call_tool(self, ctx):
        params = ctx.msg.get("params") or {}
        name = params.get("name")
        args = params.get("arguments") or {}
        if name == "stats":
            gets = {k: v["gets"] for k, v in self.tasks.items()}
            out = text(json.dumps({"cancelled": self.cancelled_tasks, "gets": gets}))
            if ERA == "2026":
                out["resultType"] = "complete"
            return out
        base = {"createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z",
                "ttl": 60000, "pollInterval": 100, "pollIntervalMs": 100}
        if name == "bad_create":
            variant = args.get("variant")
            task = dict(base, status="working")
            if variant == "id_number":
                task["taskId"] = 5
            elif variant == "empty_id":
                task["taskId"] = ""
            elif variant == "huge_id":
                task["taskId"] = "x" * 100000
            elif variant == "unknown_status":
                task["taskId"] = "t-unknown"
                task["status"] = "running"
                self.tasks["t-unknown"] = {"variant": "plain", "args": args, "gets": 0}
            elif variant != "no_id":
                raise RpcError(-32602, f"unknown variant {variant}")
            return self.task_answer(task)
        if name == "bad_poll":
            self.n += 1
            tid = f"t-{self.n}"
            self.tasks[tid] = {"variant": args.get("variant"), "args": args, "gets": 0}
            return self.task_answer(dict(base, taskId=tid, status="working"))
        raise RpcError(-32602, f"Unknown tool: {name}")

    def lookup(self, ctx):
        tid = (ctx.msg.get("params") or {}).get("taskId")
        if tid == "t-other":
            return tid, {"variant": "other", "args": {}, "gets": 0}
        task = self.tasks.get(tid)
        if task is None:
            raise RpcError(-32602, "task not found")
        return tid, task

    def get_task(self, ctx):
        tid, task = self.lookup(ctx)
        task["gets"] += 1
        variant, args = task["variant"], task["args"]
        out = {"taskId": tid, "status": "working", "pollInterval": 100, "pollIntervalMs": 100,
               "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": 60000}
        if ERA == "2026":
            out["resultType"] = "complete"
        if tid in self.cancelled_tasks:
            out["status"] = "cancelled"
        elif variant == "other_id":
            out.update(taskId="t-other", status="completed")
            if ERA == "2026":
                out["result"] = text("SECRET of t-other")
        elif variant == "unknown_status":
            out["status"] = "sleeping"
        elif variant == "bad_inputs":
            out.update(status="input_required", inputRequests="please")
        elif variant == "ask_forever":
            # A new question on every poll, never done.
            out.update(status="input_required", inputRequests={f"q{task['gets']}": {
                "method": "elicitation/create",
                "params": {"mode": "form", "message": f"Question {task['gets']}?",
                           "requestedSchema": {"type": "object", "properties": {"a": {"type": "string"}}}},
            }})
        elif variant == "big_result":
            out["status"] = "completed"
            if ERA == "2026":
                out["result"] = text("b" * int(args.get("bytes", 9_000_000)))
        elif variant == "big_status":
            if task["gets"] > int(args.get("polls", 3)):
                out["status"] = "completed"
                if ERA == "2026":
                    out["result"] = text("done")
            else:
                out["statusMessage"] = "s" * int(args.get("bytes", 2_000_000))
        return out

    def task_result(self, ctx):
        tid, task = self.lookup(ctx)
        if tid == "t-other":
            return text("SECRET of t-other")
        if task["variant"] == "big_result":
            return text("b" * int(task["args"].get("bytes", 9_000_000)))
        return text("done")

    def cancel_task(self, ctx):
        tid = (ctx.msg.get("params") or {}).get("taskId")
        self.cancelled_tasks.append(tid)
        if tid not in self.tasks:
            raise RpcError(-32602, "task not found")
        return {"taskId": tid, "status": "cancelled"}


Stub().run()
