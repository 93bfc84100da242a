"""A minimal agent engine on Switchyard's gRPC API (docs/engines.md).

    python3 examples/engine.py [--endpoint 127.0.0.1:7700] [--token TOKEN]
                               [--tool orders__get_order]
                               [--arguments '{"order_id": "O-1001"}']

It generates the Python client from proto/switchyard/v1/*.proto (with
grpcio-tools, into a temporary directory), then runs one turn of an engine:

1. creates a session (every server, mode `auto`);
2. lists the session's tools and checks TOOL is one;
3. subscribes to the session's events (on a thread), before calling;
4. calls TOOL; if the call moved to the background, ends the turn and waits
   for its `background_call.*` event, whose `result.modelText` is what the
   model reads next; otherwise the answer's `text` is;
5. answers each `interaction.required` event as it comes, while the call
   waits for it (an approval of a `confirm` tool, a server's form), by
   denying or declining it: there is no user here (a real engine shows the
   card to its user and answers with what they chose);
6. deletes the session.

It prints one JSON object per step on stdout and exits 0 when the call's
result arrived, 1 otherwise. Needs: pip install grpcio grpcio-tools.
"""

import argparse
import json
import os
import pathlib
import queue
import shutil
import sys
import tempfile
import threading
import time


def generated_client(proto_root: pathlib.Path):
    """Generates the switchyard.v1 modules and imports them."""
    from grpc_tools import protoc

    out = pathlib.Path(tempfile.mkdtemp(prefix="switchyard-py-"))
    protos = sorted(str(p) for p in (proto_root / "switchyard" / "v1").glob("*.proto"))
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    status = protoc.main(
        ["protoc", f"-I{proto_root}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}", *protos]
    )
    if status != 0:
        sys.exit(f"protoc failed on {proto_root}")
    for d in (out / "switchyard", out / "switchyard" / "v1"):
        (d / "__init__.py").touch()
    sys.path.insert(0, str(out))
    from switchyard.v1 import engine_pb2, engine_pb2_grpc

    # Imported: the generated files are no longer needed.
    shutil.rmtree(out, ignore_errors=True)
    return engine_pb2, engine_pb2_grpc


_said = threading.Lock()


def say(step: str, **fields) -> None:
    # One whole line at a time: the events thread says things too.
    with _said:
        print(json.dumps({"step": step, **fields}), flush=True)


def main() -> int:
    here = pathlib.Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="127.0.0.1:7700", help="the control plane's gRPC address")
    parser.add_argument("--token", default=os.environ.get("SWITCHYARD_TOKEN"), help="an engine token")
    parser.add_argument("--tool", default="orders__get_order")
    parser.add_argument("--arguments", default='{"order_id": "O-1001"}')
    parser.add_argument("--proto", default=str(here.parent / "proto"))
    parser.add_argument("--wait", type=float, default=60.0, help="seconds to wait for a background result")
    args = parser.parse_args()

    import grpc

    pb, rpc = generated_client(pathlib.Path(args.proto))
    channel = grpc.insecure_channel(args.endpoint)
    engine = rpc.EngineServiceStub(channel)
    metadata = [("authorization", f"Bearer {args.token}")] if args.token else []

    # 1. A session: one conversation of the engine.
    session = engine.CreateSession(
        pb.CreateSessionRequest(permission_mode=pb.PERMISSION_MODE_AUTO), metadata=metadata
    )
    say("session", id=session.id)
    try:
        # 2. Its tools, with engine-visible names and effective hints.
        tools = engine.ListTools(pb.ListToolsRequest(session_id=session.id), metadata=metadata).tools
        names = [t.name for t in tools]
        say("tools", count=len(names), has_tool=args.tool in names)
        if args.tool not in names:
            return 1

        # 3. Its events, subscribed before the call so nothing is missed.
        events: "queue.Queue" = queue.Queue()
        stream = engine.SubscribeEvents(pb.SubscribeEventsRequest(session_id=session.id), metadata=metadata)

        def follow() -> None:
            try:
                for ev in stream:
                    if ev.type == "interaction.required":
                        # 5. Answered here, at once: a call in the foreground
                        # waits for it. No user here: deny an approval,
                        # decline a form or a URL.
                        data = json.loads(ev.data_json)
                        action = "deny" if data.get("kind") == "approval" else "decline"
                        try:
                            engine.AnswerInteraction(
                                pb.AnswerInteractionRequest(
                                    session_id=session.id, interaction_id=data["id"], action=action
                                ),
                                metadata=metadata,
                            )
                        except grpc.RpcError as e:  # answered elsewhere, or timed out
                            say("not answered", interaction=data["id"], error=e.details())
                            continue
                        say("declined", interaction=data["id"], kind=data.get("kind"), action=action)
                    else:
                        events.put(ev)
            except grpc.RpcError:
                pass  # cancelled at the end

        threading.Thread(target=follow, daemon=True).start()

        # 4. The call.
        run_id = f"turn-{int(time.time() * 1000)}"
        answer = engine.CallTool(
            pb.CallToolRequest(session_id=session.id, run_id=run_id, tool=args.tool, arguments_json=args.arguments),
            metadata=metadata,
        )
        if not answer.HasField("background"):
            say("result", background=False, is_error=answer.is_error, text=answer.text)
            return 0
        moved = answer.background.id
        say("moved", background=True, id=moved, text=answer.text)
        # The turn ends here; the result wakes the engine up later.
        deadline = time.monotonic() + args.wait
        while time.monotonic() < deadline:
            try:
                ev = events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            data = json.loads(ev.data_json)
            if ev.type.startswith("background_call.") and data.get("id") == moved:
                result = data.get("result") or {}
                say("event", type=ev.type, id=moved, model_text=result.get("modelText", ""))
                return 0 if ev.type == "background_call.completed" else 1
        say("timeout", id=moved)
        return 1
    finally:
        # 6. The conversation is over.
        engine.DeleteSession(pb.DeleteSessionRequest(session_id=session.id), metadata=metadata)
        channel.close()


if __name__ == "__main__":
    sys.exit(main())
