#!/usr/bin/env python3
"""schemas: tools with outputSchema, for structured result validation.

Tools (each returns structuredContent and the same JSON as text):
  weather        outputSchema {temperature: number, required}; valid result
  bad_weather    same outputSchema; returns {"temperature": "hot"} (a violation)
  tree {depth=3, bad=false}  recursive $ref schema (#/$defs/node); bad=true puts
                 a string where the deepest integer belongs
  broken         outputSchema {"type": 12} (not a schema); returns {"a": 1}
  remote         outputSchema {"$ref": "https://example.invalid/s.json"}; {"a": 1}
"""
import json

from mcpstub import Server

srv = Server("schemas")
WEATHER = {"type": "object", "properties": {"temperature": {"type": "number"}}, "required": ["temperature"]}
TREE = {"$defs": {"node": {"type": "object", "required": ["value"], "properties": {
    "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
    "$ref": "#/$defs/node"}


def structured(value):
    return {"content": [{"type": "text", "text": json.dumps(value)}], "structuredContent": value}


def tool(name, schema, fn):
    srv.tool(name, name)(lambda args, ctx: structured(fn(args)))
    srv.tools[name][1]["outputSchema"] = schema


def tree(depth, bad):
    node = {"value": "x" if bad else depth}
    if depth > 0:
        node = {"value": depth, "children": [tree(depth - 1, bad)]}
    return node


tool("weather", WEATHER, lambda a: {"temperature": 21.5})
tool("bad_weather", WEATHER, lambda a: {"temperature": "hot"})
tool("tree", TREE, lambda a: tree(int(a.get("depth", 3)), bool(a.get("bad"))))
tool("broken", {"type": 12}, lambda a: {"a": 1})
tool("remote", {"$ref": "https://example.invalid/s.json"}, lambda a: {"a": 1})
srv.run()
