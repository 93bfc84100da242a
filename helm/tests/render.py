#!/usr/bin/env python3
"""Renders the Switchyard chart offline with the real Helm engine.

`helm template` without a helm binary: PyPI `helm-python-sdk` embeds Helm's
Go engine (scripts/install-test-peers.sh installs it into
tests/peers/.venv). Values files merge like `helm -f A -f B` (maps merge
key by key, a later file wins, lists are replaced); the chart's
values.schema.json is applied by Helm as usual.

    tests/peers/.venv/bin/python helm/tests/render.py \
        -f my-values.yaml --name switchyard --namespace mcp --out rendered/
    tests/peers/.venv/bin/kubernetes-validate --strict -k 1.30.0 rendered/*.yaml

Writes one file per non-empty template (`templates/x.yaml` ->
`OUT/x.yaml`) and prints their paths. With `--configs DIR`, also writes
the configuration files the ConfigMaps carry: `DIR/switchyard.toml` (the
control plane's) and `DIR/SERVER-sidecar.toml` (one per server). Exit
status 1 on a render error (the message names the template, line and
column).
"""

from __future__ import annotations

import argparse
import copy
import pathlib
import sys
from typing import Any

import yaml

CHART = pathlib.Path(__file__).resolve().parent.parent / "switchyard"


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Helm's -f merge: maps merge recursively, anything else is replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_values(files: list[str | pathlib.Path]) -> dict[str, Any]:
    """Reads and merges values files, in order."""
    values: dict[str, Any] = {}
    for f in files:
        doc = yaml.safe_load(pathlib.Path(f).read_text()) or {}
        if not isinstance(doc, dict):
            raise ValueError(f"{f}: values must be a YAML map")
        values = merge(values, doc)
    return values


def render(
    values: dict[str, Any],
    *,
    name: str = "switchyard",
    namespace: str = "switchyard",
    chart: pathlib.Path = CHART,
) -> dict[str, str]:
    """Renders the chart: {template path: manifest text}, empty ones left out."""
    import helm_python

    out = helm_python.Chart.load(str(chart)).render(
        values, name=name, namespace=namespace, is_install=True
    )
    return {path: text for path, text in sorted(out.items()) if text.strip()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-f", "--values", action="append", default=[], help="values file (repeatable)")
    ap.add_argument("--name", default="switchyard", help="release name")
    ap.add_argument("--namespace", default="switchyard", help="release namespace")
    ap.add_argument("--out", required=True, help="directory for the rendered manifests")
    ap.add_argument("--configs", help="directory for the configuration files in the ConfigMaps")
    args = ap.parse_args()
    try:
        manifests = render(load_values(args.values), name=args.name, namespace=args.namespace)
    except Exception as e:  # the engine's message names template, line and column
        print(f"error: {e}", file=sys.stderr)
        return 1
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for path, text in manifests.items():
        # "switchyard/templates/x.yaml" -> "x.yaml"; NOTES.txt is not a manifest.
        rel = pathlib.PurePosixPath(path)
        if rel.name == "NOTES.txt":
            continue
        target = out / rel.name
        target.write_text(text)
        print(target)
    if args.configs:
        configs = pathlib.Path(args.configs)
        configs.mkdir(parents=True, exist_ok=True)
        for path, text in manifests.items():
            if path.endswith("NOTES.txt"):
                continue
            for doc in yaml.safe_load_all(text):
                if not doc or doc.get("kind") != "ConfigMap":
                    continue
                for key, body in (doc.get("data") or {}).items():
                    if key == "switchyard.toml":
                        target = configs / key
                    elif key == "sidecar.toml":
                        server = doc["metadata"]["labels"]["switchyard.dev/server"]
                        target = configs / f"{server}-sidecar.toml"
                    else:
                        continue
                    target.write_text(body)
                    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
