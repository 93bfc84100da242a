"""Tests of the Switchyard Helm chart (helm/switchyard), run by
scripts/chart-test.sh (`python -m unittest` in tests/peers/.venv).

Everything is real and offline:
- the chart is rendered and linted by the real Helm v4 engine (PyPI
  helm-python-sdk), for every values file in helm/tests/values/;
- every rendered manifest is validated by `kubernetes-validate --strict -k
  1.30.0` (the Kubernetes 1.30 OpenAPI schemas);
- every rendered configuration file is loaded by the binaries' own check:
  `switchyard check-config FILE` (control plane) and `switchyard-sidecar
  check-config --config FILE` (each server's sidecar). The files a
  configuration names (certificates, tokens, the encryption key, secret
  header files) come from Secret volumes in the pod, so the test lays out
  each container's volume mounts under a temporary root, as the kubelet
  would, and points the configuration's absolute paths there;
- the Grafana dashboard is valid JSON and uses only metrics that
  docs/metrics.md or the code defines.

Environment: SWITCHYARD_BIN_DIR (default $CARGO_TARGET_DIR/debug, else
target/debug) holds switchyard and switchyard-sidecar.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from typing import Any

import yaml

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import render as chart_render  # noqa: E402

ROOT = HERE.parent.parent
CHART = ROOT / "helm" / "switchyard"
VALUES = HERE / "values"
RELEASE, NAMESPACE = "switchyard", "switchyard"
VENV_BIN = pathlib.Path(sys.executable).parent
KUBE_VERSION = "1.30.0"

# Every values file is a value set; "defaults" is values.yaml alone, and
# "tls-inline" is tls.yaml with the PEM text in the values, so the chart
# creates the TLS Secret itself.
VALUE_SETS = ["defaults", "embedded", "etcd-bundled", "etcd-external", "header-secrets", "key-rotation", "mcp",
              "oauth", "servers", "tls", "tls-inline"]

# Part of every secret header value the test's Secrets hold: it must never
# appear in a rendered manifest nor in a check's output.
SENTINEL = "sentinel-3f9c1e7a-never-rendered"

# key-rotation.yaml's token-encryption keys, as the Secrets you manage hold
# them: 32 bytes each, base64 (what `openssl rand -base64 32` writes).
KEYS = {secret: base64.b64encode(hashlib.sha256(secret.encode()).digest()).decode() + "\n"
        for secret in ["switchyard-key-2026-09", "switchyard-key-2026-03", "switchyard-token-encryption"]}


def bin_dir() -> pathlib.Path:
    if os.environ.get("SWITCHYARD_BIN_DIR"):
        return pathlib.Path(os.environ["SWITCHYARD_BIN_DIR"])
    target = os.environ.get("CARGO_TARGET_DIR") or str(ROOT / "target")
    return pathlib.Path(target) / "debug"


@functools.cache
def pki() -> dict[str, dict[str, str]]:
    """A test CA and two certificates signed by it (openssl): the control
    plane's (its Service name) and the sidecars' (*.NAMESPACE.svc). Returns
    Secret contents: {secret: {tls.crt, tls.key, ca.crt}}."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="switchyard-chart-pki-"))

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=switchyard-chart-test-ca")
    out: dict[str, dict[str, str]] = {}
    for name, cn, san in [
        ("cp", "switchyard", f"DNS:{RELEASE}.{NAMESPACE}.svc"),
        ("sidecar", "switchyard-sidecar", f"DNS:*.{NAMESPACE}.svc"),
    ]:
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}")
        (d / f"{name}.ext").write_text(
            f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext")
        out[name] = {
            "tls.crt": (d / f"{name}.crt").read_text(),
            "tls.key": (d / f"{name}.key").read_text(),
            "ca.crt": (d / "ca.crt").read_text(),
        }
    shutil.rmtree(d)
    return out


def existing_secrets() -> dict[str, dict[str, str]]:
    """Secrets the values files name but the chart does not create: tls.yaml's
    certificates (cert-manager's, say), header-secrets.yaml's header values,
    key-rotation.yaml's token-encryption keys and oauth.yaml's OAuth client
    secret."""
    return {
        **{secret: {"token-encryption.key": key} for secret, key in KEYS.items()},
        "switchyard-control-plane-tls": pki()["cp"],
        "switchyard-sidecar-tls": pki()["sidecar"],
        "github-pat": {"authorization": f"Bearer ghp_{SENTINEL}\n"},
        "shared-api-keys": {"github.key": f"{SENTINEL}-api-key"},
        "orders-credentials": {"token": f"  Bearer {SENTINEL}-orders  \n"},
        "linear-oauth-client": {"client-secret": f"{SENTINEL}-oauth-client\n"},
    }


def values_for(value_set: str) -> dict[str, Any]:
    if value_set == "defaults":
        return {}
    if value_set == "tls-inline":
        values = chart_render.load_values([VALUES / "tls.yaml"])
        cp = pki()["cp"]
        values["tls"].update(existingSecret="", sidecarExistingSecret="",
                             cert=cp["tls.crt"], key=cp["tls.key"], ca=cp["ca.crt"])
        return values
    return chart_render.load_values([VALUES / f"{value_set}.yaml"])


@functools.cache
def rendered(value_set: str) -> dict[str, str]:
    return chart_render.render(values_for(value_set), name=RELEASE, namespace=NAMESPACE)


@functools.cache
def objects(value_set: str) -> list[dict[str, Any]]:
    out = []
    for path, text in rendered(value_set).items():
        if path.endswith("NOTES.txt"):
            continue
        out.extend(d for d in yaml.safe_load_all(text) if d)
    return out


def find(value_set: str, kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objects(value_set)
            if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(value_set: str, kind: str, name: str) -> dict[str, Any]:
    found = find(value_set, kind, name)
    assert len(found) == 1, f"{value_set}: {kind}/{name}: {len(found)} found"
    return found[0]


def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


class Lint(unittest.TestCase):
    def test_helm_lint_is_clean_for_every_value_set(self) -> None:
        import helm_python

        for value_set in VALUE_SETS:
            with self.subTest(value_set=value_set):
                values = values_for(value_set)
                report = helm_python.lint(str(CHART), values, strict=True, namespace=NAMESPACE,
                                          kube_version=f"v{KUBE_VERSION}")
                self.assertEqual(report["errors"], [], report)
                bad = [m for m in report["messages"] if m["severity"] >= 2]
                self.assertEqual(bad, [], report)

    def test_yamllint_values_files(self) -> None:
        files = [CHART / "values.yaml", CHART / "Chart.yaml", *sorted(VALUES.glob("*.yaml"))]
        r = run([str(VENV_BIN / "yamllint"), "-s", "-d",
                 "{extends: relaxed, rules: {line-length: {max: 120}}}", *map(str, files)])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class Render(unittest.TestCase):
    def test_kubernetes_validate_strict(self) -> None:
        validator = VENV_BIN / "kubernetes-validate"
        for value_set in VALUE_SETS:
            with self.subTest(value_set=value_set), tempfile.TemporaryDirectory() as d:
                files = []
                for path, text in rendered(value_set).items():
                    if path.endswith("NOTES.txt"):
                        continue
                    f = pathlib.Path(d) / pathlib.PurePosixPath(path).name
                    f.write_text(text)
                    files.append(str(f))
                r = run([str(validator), "--strict", "-k", KUBE_VERSION, "--quiet", *files])
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertNotIn("ERROR", r.stdout)
                # Only the Prometheus Operator's CRD has no built-in schema.
                for line in r.stdout.splitlines():
                    if line.startswith("WARN"):
                        self.assertIn("kind ServiceMonitor with api version monitoring.coreos.com/v1", line)

    def test_embedded_store_runs_one_replica_on_a_claim(self) -> None:
        d = one("embedded", "Deployment", RELEASE)
        self.assertEqual(d["spec"]["replicas"], 1)  # the values ask for 3
        self.assertEqual(d["spec"]["strategy"]["type"], "Recreate")
        claim = one("embedded", "PersistentVolumeClaim", f"{RELEASE}-data")
        self.assertEqual(claim["spec"]["resources"]["requests"]["storage"], "2Gi")
        volumes = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
        self.assertEqual(volumes["data"]["persistentVolumeClaim"]["claimName"], f"{RELEASE}-data")
        self.assertEqual(find("embedded", "StatefulSet"), [])
        self.assertEqual(find("embedded", "PodDisruptionBudget"), [])
        self.assertIn('path = "/var/lib/switchyard/store.redb"', cp_config("embedded"))
        self.assertNotIn("etcd_endpoints", cp_config("embedded"))

    def test_background_calls_are_configured_from_values(self) -> None:
        self.assertIn("[backgroundCalls]\nautoAfterSec = 180\nmaxPerTarget = 20\n", cp_config("embedded"))
        values = values_for("embedded")
        values = merge_values(values, {"controlPlane": {"backgroundCalls": {
            "autoAfterSec": 30, "maxPerTarget": 5, "maxDurationSec": 3600, "retentionSec": 60}}})
        out = chart_render.render(values, name=RELEASE, namespace=NAMESPACE)
        docs = [d for path, text in out.items() if not path.endswith("NOTES.txt")
                for d in yaml.safe_load_all(text) if d]
        config = next(o for o in docs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == f"{RELEASE}-config")
        self.assertIn("autoAfterSec = 30\nmaxPerTarget = 5\nmaxDurationSec = 3600\nretentionSec = 60",
                      config["data"]["switchyard.toml"])

    def test_bundled_etcd(self) -> None:
        d = one("etcd-bundled", "Deployment", RELEASE)
        self.assertEqual(d["spec"]["replicas"], 3)
        pdbs = {p["metadata"]["name"]: p for p in find("etcd-bundled", "PodDisruptionBudget")}
        self.assertEqual(pdbs[RELEASE]["spec"]["maxUnavailable"], 1)
        self.assertEqual(pdbs[f"{RELEASE}-etcd"]["spec"]["minAvailable"], 2)
        sts = one("etcd-bundled", "StatefulSet", f"{RELEASE}-etcd")
        self.assertEqual(sts["spec"]["replicas"], 3)
        env = {e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
        members = env["ETCD_INITIAL_CLUSTER"].split(",")
        self.assertEqual(len(members), 3)
        self.assertEqual(
            members[1],
            f"{RELEASE}-etcd-1=http://{RELEASE}-etcd-1.{RELEASE}-etcd-headless.{NAMESPACE}.svc:2380")
        config = cp_config("etcd-bundled")
        for i in range(3):
            self.assertIn(f"http://{RELEASE}-etcd-{i}.{RELEASE}-etcd-headless.{NAMESPACE}.svc:2379", config)
        self.assertEqual(len(find("etcd-bundled", "NetworkPolicy")), 3)
        self.assertEqual(len(find("etcd-bundled", "ServiceMonitor")), 1)
        self.assertEqual(len(find("etcd-bundled", "PersistentVolumeClaim")), 0)

    def test_external_etcd(self) -> None:
        self.assertEqual(find("etcd-external", "StatefulSet"), [])
        config = cp_config("etcd-external")
        self.assertIn('etcd_endpoints = ["https://etcd-0.etcd.example:2379",', config)
        self.assertIn('root = "/switchyard/prod/v1/"', config)
        self.assertEqual(one("etcd-external", "Deployment", RELEASE)["spec"]["replicas"], 2)

    def test_servers_one_pod_each(self) -> None:
        deployments = {d["metadata"]["name"]: d for d in find("servers", "Deployment")}
        self.assertEqual(set(deployments), {RELEASE, f"{RELEASE}-everything", f"{RELEASE}-py-tools",
                                            f"{RELEASE}-web", f"{RELEASE}-search-api"})
        # stdio: the sidecar runs in the server's image, from the shared volume.
        pod = deployments[f"{RELEASE}-everything"]["spec"]["template"]["spec"]
        (init,) = pod["initContainers"]
        self.assertEqual(init["image"], "switchyard:0.1.0")
        self.assertEqual(init["command"], ["cp", "/usr/local/bin/switchyard-sidecar",
                                           "/switchyard/bin/switchyard-sidecar"])
        (main,) = pod["containers"]
        self.assertEqual(main["image"], "node:22-bookworm-slim")
        self.assertEqual(main["command"], ["/switchyard/bin/switchyard-sidecar"])
        self.assertEqual(main["args"][:3], ["run", "--config", "/etc/switchyard/config/sidecar.toml"])
        self.assertEqual(main["args"][3:5], ["--advertise", "http://$(POD_IP):7702"])
        volumes = {v["name"]: v for v in pod["volumes"]}
        self.assertEqual(volumes["switchyard-bin"], {"name": "switchyard-bin", "emptyDir": {}})
        self.assertIn({"name": "switchyard-bin", "mountPath": "/switchyard/bin", "readOnly": True},
                      main["volumeMounts"])
        self.assertIn("API_TOKEN", [e["name"] for e in main["env"]])
        # http: the server's container and the sidecar beside it.
        pod = deployments[f"{RELEASE}-web"]["spec"]["template"]["spec"]
        self.assertNotIn("initContainers", pod)
        server, sidecar = pod["containers"]
        self.assertEqual((server["name"], sidecar["name"]), ("server", "sidecar"))
        self.assertEqual(server["command"], ["node", "server.js"])
        self.assertEqual(sidecar["image"], "switchyard:0.1.0")
        self.assertEqual(sidecar["command"], ["/usr/local/bin/switchyard-sidecar"])
        self.assertIn('url = "http://127.0.0.1:3001/api/mcp"', sidecar_config("servers", "web"))
        # http at a URL: the sidecar alone.
        pod = deployments[f"{RELEASE}-search-api"]["spec"]["template"]["spec"]
        self.assertEqual([c["name"] for c in pod["containers"]], ["sidecar"])
        config = sidecar_config("servers", "search-api")
        self.assertIn('name = "Search-API"', config)
        self.assertIn('headers = { "X-Tenant" = "platform" }', config)
        # livenessIntervalSec, 0 included (never probe); left out: the default.
        self.assertIn("liveness_interval_sec = 0", config)
        self.assertIn("liveness_interval_sec = 30", sidecar_config("servers", "web"))
        self.assertNotIn("liveness_interval_sec", sidecar_config("servers", "everything"))
        # The control plane registers all four.
        self.assertEqual(cp_config("servers").count("[[servers]]"), 4)
        for d in deployments.values():
            for c in d["spec"]["template"]["spec"]["containers"]:
                self.assertIn("resources", c)
                self.assertFalse(c["securityContext"]["allowPrivilegeEscalation"])

    def test_shutdown_prestop_sleep_and_grace(self) -> None:
        def pre_stop(c: dict[str, Any]) -> list[str] | None:
            return c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")

        cp = one("defaults", "Deployment", RELEASE)["spec"]["template"]["spec"]
        self.assertEqual(pre_stop(cp["containers"][0]), ["sleep", "5"])
        self.assertGreater(cp["terminationGracePeriodSeconds"], 5 + 30)
        deployments = {d["metadata"]["name"]: d for d in find("servers", "Deployment")}
        for name in ["everything", "py-tools", "web", "search-api"]:
            pod = deployments[f"{RELEASE}-{name}"]["spec"]["template"]["spec"]
            sidecar = pod["containers"][-1]
            self.assertEqual(pre_stop(sidecar), ["sleep", "5"], name)
            # Covers the preStop sleep, the 1 s notice and the drain.
            self.assertGreater(pod["terminationGracePeriodSeconds"], 5 + 1 + 10, name)
        # An http server beside its sidecar outlives the sidecar's drain.
        server = deployments[f"{RELEASE}-web"]["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(server["name"], "server")
        self.assertEqual(pre_stop(server), ["sleep", str(5 + 1 + 10)])
        # 0: no hook at all.
        out = chart_render.render(merge_values(values_for("servers"), {"lifecycle": {"preStopSleepSeconds": 0}}),
                                  name=RELEASE, namespace=NAMESPACE)
        self.assertNotIn("preStop", "".join(out.values()))

    def test_tls_and_auth(self) -> None:
        config = cp_config("tls")
        self.assertIn('cert_file = "/etc/switchyard/tls/tls.crt"', config)
        self.assertIn("require_client_cert = true", config)
        self.assertIn('token_file = "/etc/switchyard/auth/engine"', config)
        sidecar = sidecar_config("tls", "everything")
        self.assertIn(f'control_plane = "https://{RELEASE}.{NAMESPACE}.svc:7700"', sidecar)
        self.assertIn('token_file = "/etc/switchyard/auth/token"', sidecar)
        pod = one("tls", "Deployment", f"{RELEASE}-orders")["spec"]["template"]["spec"]
        sidecar_c = pod["containers"][1]
        self.assertIn(f"https://{RELEASE}-orders.{NAMESPACE}.svc:7702", sidecar_c["args"])
        volumes = {v["name"]: v for v in pod["volumes"]}
        self.assertEqual(volumes["tls"]["secret"]["secretName"], "switchyard-sidecar-tls")
        # orders' sidecar sends its own token, bound to orders; the others
        # send auth.sidecarToken.
        self.assertEqual(volumes["auth"]["secret"]["items"], [{"key": "orders-sidecar", "path": "token"}])
        self.assertIn('name = "orders-sidecar"\nrole = "sidecar"\ntoken_file = "/etc/switchyard/auth/orders-sidecar"\n'
                      'servers = ["orders"]', config)
        pod = one("tls", "Deployment", f"{RELEASE}-everything")["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        self.assertEqual(volumes["auth"]["secret"]["items"], [{"key": "sidecar", "path": "token"}])
        # tls.yaml references its certificates; tls-inline makes the chart create them.
        secrets = {s["metadata"]["name"] for s in find("tls", "Secret")}
        self.assertNotIn(f"{RELEASE}-tls", secrets)
        tls = one("tls-inline", "Secret", f"{RELEASE}-tls")
        self.assertEqual(tls["type"], "kubernetes.io/tls")

    def test_header_secrets_are_files_from_secrets(self) -> None:
        deployments = {d["metadata"]["name"]: d for d in find("header-secrets", "Deployment")}
        expected = {
            "github": [("Authorization", "github-pat", "authorization"),
                       ("X-Api-Key", "shared-api-keys", "github.key")],
            "orders": [("Authorization", "orders-credentials", "token")],
        }
        for slug, entries in expected.items():
            with self.subTest(server=slug):
                pod = deployments[f"{RELEASE}-{slug}"]["spec"]["template"]["spec"]
                sidecar = next(c for c in pod["containers"] if c["name"] == "sidecar")
                self.assertIn({"name": "header-secrets", "mountPath": "/etc/switchyard/header-secrets",
                               "readOnly": True}, sidecar["volumeMounts"])
                # Only the sidecar reads them, not the server's container.
                for c in pod["containers"]:
                    if c is not sidecar:
                        self.assertNotIn("header-secrets", [m["name"] for m in c.get("volumeMounts", [])])
                volumes = {v["name"]: v for v in pod["volumes"]}
                projected = volumes["header-secrets"]["projected"]
                self.assertEqual(projected["defaultMode"], 0o400)
                self.assertEqual(projected["sources"], [
                    {"secret": {"name": secret, "items": [{"key": key, "path": header}]}}
                    for header, secret, key in entries])
                files = ", ".join(f'"{header}" = "/etc/switchyard/header-secrets/{header}"'
                                  for header, _, _ in entries)
                # The sidecar reads the files; the control plane keeps the paths only.
                for config in (sidecar_config("header-secrets", slug), cp_config("header-secrets")):
                    self.assertIn(f"header_files = {{ {files} }}", config)
        github = sidecar_config("header-secrets", "github")
        self.assertIn('auth = "headers"', github)
        self.assertIn('headers = { "X-Team" = "platform" }', github)
        self.assertNotIn("auth =", sidecar_config("header-secrets", "orders"))  # inferred: headers
        public = sidecar_config("header-secrets", "public")
        self.assertIn('auth = "none"', public)
        self.assertNotIn("header_files", public)
        pod = deployments[f"{RELEASE}-public"]["spec"]["template"]["spec"]
        self.assertNotIn("header-secrets", [v["name"] for v in pod["volumes"]])
        # The chart creates no Secret for them: it references the given ones.
        self.assertEqual({s["metadata"]["name"] for s in find("header-secrets", "Secret")},
                         {f"{RELEASE}-token-encryption"})

    def test_no_secret_value_in_any_configmap(self) -> None:
        """The Secrets' contents (the sentinel) never reach a rendered
        object: ConfigMaps carry the paths of the files only."""
        self.assertIn(SENTINEL, existing_secrets()["github-pat"]["authorization"])  # the sentinel is in use
        for value_set in VALUE_SETS:
            with self.subTest(value_set=value_set):
                for cm in find(value_set, "ConfigMap"):
                    for key, body in (cm.get("data") or {}).items():
                        self.assertNotIn(SENTINEL, body, f"{cm['metadata']['name']}: {key}")
                        self.assertNotIn("Bearer", body, f"{cm['metadata']['name']}: {key}")
                self.assertNotIn(SENTINEL, "".join(rendered(value_set).values()))

    def test_previous_keys_are_mounted_in_order(self) -> None:
        """store.tokenEncryption.previousKeys: each referenced Secret key is a
        read-only file of the keys volume, beside the active key, and the
        configuration lists their paths in the values' order."""
        pod = one("key-rotation", "Deployment", RELEASE)["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        self.assertIn({"name": "token-encryption", "mountPath": "/etc/switchyard/keys", "readOnly": True},
                      container["volumeMounts"])
        volumes = {v["name"]: v for v in pod["volumes"]}
        projected = volumes["token-encryption"]["projected"]
        self.assertEqual(projected["defaultMode"], 0o440)  # as the active key's
        self.assertEqual(projected["sources"], [
            {"secret": {"name": secret, "items": [{"key": "token-encryption.key", "path": path}]}}
            for secret, path in [("switchyard-key-2026-09", "token-encryption.key"),
                                 ("switchyard-key-2026-03", "previous-1.key"),
                                 ("switchyard-token-encryption", "previous-2.key")]])
        self.assertIn('token_encryption_key_file = "/etc/switchyard/keys/token-encryption.key"\n'
                      'token_encryption_previous_key_files = ["/etc/switchyard/keys/previous-1.key",'
                      '"/etc/switchyard/keys/previous-2.key"]\n', cp_config("key-rotation"))
        # Previous keys are references only: the chart creates no Secret for
        # them (nor, with existingSecret, for the active key).
        self.assertEqual(find("key-rotation", "Secret"), [])
        # Without previous keys, no such line; the active key alone is mounted.
        self.assertNotIn("token_encryption_previous_key_files", cp_config("defaults"))
        pod = one("defaults", "Deployment", RELEASE)["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        self.assertEqual(volumes["token-encryption"]["projected"]["sources"], [
            {"secret": {"name": f"{RELEASE}-token-encryption",
                        "items": [{"key": "token-encryption.key", "path": "token-encryption.key"}]}}])

    def test_previous_keys_keep_their_order(self) -> None:
        """The list's order is the files' and the configuration's: reversed
        values, reversed sources; a numeric-looking key stays a string."""
        values = values_for("key-rotation")
        keys = values["store"]["tokenEncryption"]["previousKeys"]
        keys = [{"secretName": "switchyard-key-2025-09", "key": "2025"}, *reversed(keys)]
        values = merge_values(values, {"store": {"tokenEncryption": {"previousKeys": keys}}})
        out = chart_render.render(values, name=RELEASE, namespace=NAMESPACE)
        docs = [d for path, text in out.items() if not path.endswith("NOTES.txt")
                for d in yaml.safe_load_all(text) if d]
        deployment = next(o for o in docs if o["kind"] == "Deployment" and o["metadata"]["name"] == RELEASE)
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        self.assertEqual([(s["secret"]["name"], s["secret"]["items"]) for s in
                          volumes["token-encryption"]["projected"]["sources"]], [
            ("switchyard-key-2026-09", [{"key": "token-encryption.key", "path": "token-encryption.key"}]),
            ("switchyard-key-2025-09", [{"key": "2025", "path": "previous-1.key"}]),
            ("switchyard-token-encryption", [{"key": "token-encryption.key", "path": "previous-2.key"}]),
            ("switchyard-key-2026-03", [{"key": "token-encryption.key", "path": "previous-3.key"}])])
        config = next(o for o in docs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == f"{RELEASE}-config")
        self.assertIn('token_encryption_previous_key_files = ["/etc/switchyard/keys/previous-1.key",'
                      '"/etc/switchyard/keys/previous-2.key","/etc/switchyard/keys/previous-3.key"]\n',
                      config["data"]["switchyard.toml"])

    def test_no_key_material_in_any_configmap(self) -> None:
        """Neither the active key (given in the values here, so the chart
        makes its Secret) nor a previous key reaches a ConfigMap: only their
        paths do. The chart makes no Secret for a previous key."""
        active = KEYS["switchyard-key-2026-09"].strip()
        values = merge_values(values_for("key-rotation"), {"store": {"tokenEncryption": {
            "existingSecret": "", "key": active,
            "previousKeys": [{"secretName": "switchyard-key-2026-03", "key": "token-encryption.key"}]}}})
        out = chart_render.render(values, name=RELEASE, namespace=NAMESPACE)
        docs = [d for path, text in out.items() if not path.endswith("NOTES.txt")
                for d in yaml.safe_load_all(text) if d]
        (secret,) = [o for o in docs if o["kind"] == "Secret"]
        self.assertEqual(secret["metadata"]["name"], f"{RELEASE}-token-encryption")
        self.assertIn('token_encryption_previous_key_files = ["/etc/switchyard/keys/previous-1.key"]\n',
                      next(o for o in docs if o["kind"] == "ConfigMap"
                           and o["metadata"]["name"] == f"{RELEASE}-config")["data"]["switchyard.toml"])
        self.assertEqual(base64.b64decode(secret["data"]["token-encryption.key"]).decode(), active)
        configmaps = [o for o in docs if o["kind"] == "ConfigMap"]
        configmaps += [cm for value_set in VALUE_SETS for cm in find(value_set, "ConfigMap")]
        for cm in configmaps:
            for key, body in (cm.get("data") or {}).items():
                for material in [*(k.strip() for k in KEYS.values()),
                                 base64.b64encode(active.encode()).decode()]:
                    self.assertNotIn(material, body, f"{cm['metadata']['name']}: {key}")
        for value_set in VALUE_SETS:
            for material in KEYS.values():
                self.assertNotIn(material.strip(), "".join(rendered(value_set).values()), value_set)

    def test_oauth_servers(self) -> None:
        """servers[].auth: oauth and servers[].oauth become [servers.oauth] in
        the control plane's configuration, with the client secret as a file
        mounted from its Secret into the control plane only; the sidecar's
        [server.oauth] is the same spec without that file. oauth becomes
        [oauth]."""
        config = cp_config("oauth")
        self.assertIn('[oauth]\nadmin_base_url = "https://switchyard.example.com"\n'
                      'allow_private_addresses = true\n', config)
        self.assertIn('url = "https://mcp.linear.app/mcp"\nheaders = { "X-Team" = "platform" }\nauth = "oauth"\n\n'
                      '[servers.oauth]\nclient_id = "switchyard-prod"\n'
                      'client_secret_file = "/etc/switchyard/oauth-client-secrets/linear"\n'
                      'scopes = ["read","write","issues:create"]\nallow_unadvertised_pkce = true\n', config)
        self.assertIn('name = "notes"\ntransport = "http"\nurl = "http://127.0.0.1:8080/mcp"\nauth = "oauth"\n\n'
                      '[servers.oauth]\nclient_metadata_url = "https://switchyard.example.com/oauth/client.json"\n',
                      config)
        # auth: oauth alone: no table (every key is optional).
        self.assertIn('name = "plain"\ntransport = "http"\nurl = "http://plain.tools.svc:8080/mcp"\n'
                      'auth = "oauth"\n', config)
        self.assertEqual(config.count("[servers.oauth]"), 2)
        self.assertEqual(config.count("client_secret_file"), 1)
        linear = sidecar_config("oauth", "linear")
        self.assertIn('auth = "oauth"\n\n[server.oauth]\nclient_id = "switchyard-prod"\n'
                      'scopes = ["read","write","issues:create"]\nallow_unadvertised_pkce = true\n\n[sidecar]\n',
                      linear)
        self.assertNotIn("client_secret", linear)
        self.assertIn('[server.oauth]\nclient_metadata_url = "https://switchyard.example.com/oauth/client.json"\n',
                      sidecar_config("oauth", "notes"))
        self.assertNotIn("[server.oauth]", sidecar_config("oauth", "plain"))
        # The control plane mounts the client secret, read-only, from the given
        # Secret (the chart creates none for it).
        pod = one("oauth", "Deployment", RELEASE)["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        self.assertIn({"name": "oauth-client-secrets", "mountPath": "/etc/switchyard/oauth-client-secrets",
                       "readOnly": True}, container["volumeMounts"])
        volumes = {v["name"]: v for v in pod["volumes"]}
        self.assertEqual(volumes["oauth-client-secrets"], {"name": "oauth-client-secrets", "projected": {
            "defaultMode": 0o440, "sources": [{"secret": {
                "name": "linear-oauth-client", "items": [{"key": "client-secret", "path": "linear"}]}}]}})
        self.assertEqual({s["metadata"]["name"] for s in find("oauth", "Secret")}, {f"{RELEASE}-token-encryption"})
        # Not the sidecars: they never read it.
        for slug in ["linear", "notes", "plain"]:
            spec = one("oauth", "Deployment", f"{RELEASE}-{slug}")["spec"]["template"]["spec"]
            self.assertNotIn("oauth-client-secrets", [v["name"] for v in spec["volumes"]], slug)
            self.assertNotIn("linear-oauth-client", json.dumps(spec), slug)
        # Without OAuth values: no [oauth] table, no such volume.
        for value_set in ["defaults", "servers", "header-secrets"]:
            self.assertNotIn("[oauth]", cp_config(value_set), value_set)
            spec = one(value_set, "Deployment", RELEASE)["spec"]["template"]["spec"]
            self.assertNotIn("oauth-client-secrets", [v["name"] for v in spec["volumes"]], value_set)

    def test_oauth_table_from_either_value(self) -> None:
        """[oauth] is rendered when either value is set; a base URL alone
        keeps allow_private_addresses false."""
        for over, expected in [
            ({"adminBaseUrl": "http://127.0.0.1:7780/"},
             '[oauth]\nadmin_base_url = "http://127.0.0.1:7780/"\nallow_private_addresses = false\n'),
            ({"allowPrivateAddresses": True}, "[oauth]\nallow_private_addresses = true\n"),
        ]:
            with self.subTest(oauth=over):
                out = chart_render.render({"oauth": over}, name=RELEASE, namespace=NAMESPACE)
                docs = [d for path, text in out.items() if not path.endswith("NOTES.txt")
                        for d in yaml.safe_load_all(text) if d]
                config = next(o for o in docs if o["kind"] == "ConfigMap"
                              and o["metadata"]["name"] == f"{RELEASE}-config")
                self.assertIn(expected, config["data"]["switchyard.toml"])

    def test_console_table(self) -> None:
        """[console] is rendered from console.*: on by default, off when
        disabled, with the session lifetime; a lifetime out of range is
        refused by the schema."""
        for over, expected in [
            ({}, "[console]\nenabled = true\nsession_ttl_sec = 28800\n"),
            ({"enabled": False, "sessionTtlSec": 600},
             "[console]\nenabled = false\nsession_ttl_sec = 600\n"),
        ]:
            with self.subTest(console=over):
                out = chart_render.render({"console": over}, name=RELEASE, namespace=NAMESPACE)
                docs = [d for path, text in out.items() if not path.endswith("NOTES.txt")
                        for d in yaml.safe_load_all(text) if d]
                config = next(o for o in docs if o["kind"] == "ConfigMap"
                              and o["metadata"]["name"] == f"{RELEASE}-config")
                self.assertIn(expected, config["data"]["switchyard.toml"])
                notes = next(text for path, text in out.items() if path.endswith("NOTES.txt"))
                self.assertEqual("Admin console:" in notes, over.get("enabled", True))
        with self.assertRaisesRegex(Exception, "less than the minimum|minimum"):
            chart_render.render({"console": {"sessionTtlSec": 5}}, name=RELEASE, namespace=NAMESPACE)

    def test_mcp_endpoint(self) -> None:
        """controlPlane.mcp.enabled: the [mcp] table with every value, a
        container and Service port named mcp, a NetworkPolicy rule from
        networkPolicy.mcpFrom, and the endpoint in NOTES.txt;
        controlPlane.maxConnections is control_plane.max_connections, and
        controlPlane.idleTimeoutSec is control_plane.idle_timeout_sec."""
        config = cp_config("mcp")
        self.assertIn("prune_config_servers = false\nmax_connections = 2048\nidle_timeout_sec = 300\n", config)
        self.assertIn('[mcp]\nlisten = "0.0.0.0:8701"\ntls = false\n'
                      'allowed_origins = ["https://inspector.example.com","http://localhost:6274"]\n'
                      'allowed_hosts = ["switchyard.switchyard.svc","mcp.example.com","127.0.0.1:8701"]\n'
                      "max_body_bytes = 1048576\nbody_timeout_sec = 10\nsession_idle_timeout_sec = 3600\n"
                      "max_sessions_per_caller = 32\nmax_waiting_calls_per_caller = 8\n"
                      "request_state_ttl_sec = 120\nmax_connections = 512\n", config)
        (container,) = one("mcp", "Deployment", RELEASE)["spec"]["template"]["spec"]["containers"]
        self.assertIn({"name": "mcp", "containerPort": 8701, "protocol": "TCP"}, container["ports"])
        service = one("mcp", "Service", RELEASE)
        self.assertIn({"name": "mcp", "port": 8701, "targetPort": "mcp", "protocol": "TCP", "appProtocol": "http"},
                      service["spec"]["ports"])
        policy = one("mcp", "NetworkPolicy", f"{RELEASE}-control-plane")
        rules = {r["ports"][0]["port"]: r for r in policy["spec"]["ingress"]}
        self.assertEqual(rules[8701], {"ports": [{"port": 8701, "protocol": "TCP"}], "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ide"}}}]})
        notes = next(text for path, text in rendered("mcp").items() if path.endswith("NOTES.txt"))
        self.assertIn(f"  http://{RELEASE}.{NAMESPACE}.svc:8701/mcp\n", notes)
        self.assertIn(f"kubectl -n {NAMESPACE} port-forward svc/{RELEASE} 8701:8701\n", notes)
        self.assertIn('http://127.0.0.1:8701/mcp --header "Authorization: Bearer $SWITCHYARD_TOKEN"', notes)
        # mcpFrom empty: any pod of the namespace, as engineFrom.
        out = chart_render.render(merge_values(values_for("mcp"), {"networkPolicy": {"mcpFrom": []}}),
                                  name=RELEASE, namespace=NAMESPACE)
        docs = [d for path, text in out.items() if not path.endswith("NOTES.txt")
                for d in yaml.safe_load_all(text) if d]
        policy = next(o for o in docs if o["kind"] == "NetworkPolicy"
                      and o["metadata"]["name"] == f"{RELEASE}-control-plane")
        self.assertIn({"ports": [{"port": 8701, "protocol": "TCP"}], "from": [{"podSelector": {}}]},
                      policy["spec"]["ingress"])
        # controlPlane.mcp.tls with the chart's TLS: https everywhere.
        out = chart_render.render(merge_values(values_for("tls"), {"controlPlane": {"mcp": {"enabled": True,
                                                                                          "tls": True}}}),
                                  name=RELEASE, namespace=NAMESPACE)
        config = next(d for path, text in out.items() if not path.endswith("NOTES.txt")
                      for d in yaml.safe_load_all(text) if d and d["kind"] == "ConfigMap"
                      and "switchyard.toml" in d.get("data", {}))["data"]["switchyard.toml"]
        self.assertIn('[mcp]\nlisten = "0.0.0.0:7701"\ntls = true\n', config)
        self.assertIn("[tls]\ncert_file = ", config)
        service = next(d for path, text in out.items() if not path.endswith("NOTES.txt")
                       for d in yaml.safe_load_all(text) if d and d["kind"] == "Service"
                       and d["metadata"]["name"] == RELEASE)
        self.assertIn({"name": "mcp", "port": 7701, "targetPort": "mcp", "protocol": "TCP", "appProtocol": "https"},
                      service["spec"]["ports"])
        notes = next(text for path, text in out.items() if path.endswith("NOTES.txt"))
        self.assertIn(f"  https://{RELEASE}.{NAMESPACE}.svc:7701/mcp\n", notes)
        self.assertIn("switchyard https://127.0.0.1:7701/mcp", notes)
        # Off by default: none of it, and the gRPC cap at its default.
        for value_set in ["defaults", "etcd-bundled", "tls"]:
            with self.subTest(value_set=value_set):
                self.assertNotIn("[mcp]", cp_config(value_set))
                self.assertIn("max_connections = 4096\nidle_timeout_sec = 120\n", cp_config(value_set))
                (container,) = one(value_set, "Deployment", RELEASE)["spec"]["template"]["spec"]["containers"]
                self.assertEqual([p["name"] for p in container["ports"]], ["grpc", "http", "metrics"])
                self.assertEqual([p["name"] for p in one(value_set, "Service", RELEASE)["spec"]["ports"]],
                                 ["grpc", "http", "metrics"])
                notes = next(text for path, text in rendered(value_set).items() if path.endswith("NOTES.txt"))
                self.assertNotIn("MCP endpoint", notes)
        policy = one("etcd-bundled", "NetworkPolicy", f"{RELEASE}-control-plane")
        self.assertEqual([[p["port"] for p in r["ports"]] for r in policy["spec"]["ingress"]],
                         [[7700], [7780], [7781]])

    def test_probes_and_scrapes_use_the_metrics_listener(self) -> None:
        # /metrics, /healthz and /readyz on a listener of their own, so a
        # full HTTP port (console, OAuth callback) does not fail the probes.
        for value_set in ["defaults", "etcd-bundled", "tls"]:
            with self.subTest(value_set=value_set):
                self.assertIn('http_listen = "0.0.0.0:7780"\nmetrics_listen = "0.0.0.0:7781"\n',
                              cp_config(value_set))
                (container,) = one(value_set, "Deployment", RELEASE)["spec"]["template"]["spec"]["containers"]
                ports = {p["name"]: p["containerPort"] for p in container["ports"]}
                self.assertEqual((ports["http"], ports["metrics"]), (7780, 7781))
                for probe in ["startupProbe", "livenessProbe", "readinessProbe"]:
                    self.assertEqual(container[probe]["httpGet"]["port"], "metrics", probe)
                service = {p["name"]: (p["port"], p["targetPort"])
                           for p in one(value_set, "Service", RELEASE)["spec"]["ports"]}
                self.assertEqual((service["http"], service["metrics"]), ((7780, "http"), (7781, "metrics")))

    def test_network_policy_console_and_metrics_peers(self) -> None:
        """networkPolicy.consoleFrom reaches the control plane's HTTP port
        (console, OAuth callback) and networkPolicy.metricsFrom its metrics
        port, each rule one port; an empty list lets anyone in."""
        monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ingress = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}

        def rules(network_policy: dict[str, Any]) -> list[dict[str, Any]]:
            out = chart_render.render(merge_values(values_for("etcd-bundled"), {"networkPolicy": network_policy}),
                                      name=RELEASE, namespace=NAMESPACE)
            policy = next(d for path, text in out.items() if not path.endswith("NOTES.txt")
                          for d in yaml.safe_load_all(text) if d and d["kind"] == "NetworkPolicy"
                          and d["metadata"]["name"] == f"{RELEASE}-control-plane")
            return [r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] != 7700]

        self.assertEqual(rules({"consoleFrom": [ingress], "metricsFrom": [monitoring]}), [
            {"ports": [{"port": 7780, "protocol": "TCP"}], "from": [ingress]},
            {"ports": [{"port": 7781, "protocol": "TCP"}], "from": [monitoring]}])
        # consoleFrom unset: metricsFrom's peers, as before the split.
        self.assertEqual(rules({"consoleFrom": None, "metricsFrom": [monitoring]}), [
            {"ports": [{"port": 7780, "protocol": "TCP"}], "from": [monitoring]},
            {"ports": [{"port": 7781, "protocol": "TCP"}], "from": [monitoring]}])
        # consoleFrom empty: anyone reaches the console's port.
        self.assertEqual(rules({"consoleFrom": [], "metricsFrom": [monitoring]}), [
            {"ports": [{"port": 7780, "protocol": "TCP"}]},
            {"ports": [{"port": 7781, "protocol": "TCP"}], "from": [monitoring]}])
        self.assertEqual(rules({"consoleFrom": [ingress], "metricsFrom": []}), [
            {"ports": [{"port": 7780, "protocol": "TCP"}], "from": [ingress]},
            {"ports": [{"port": 7781, "protocol": "TCP"}]}])

    def test_http_port_must_differ_from_grpc_port(self) -> None:
        # Both listeners would bind the same port: the pod would crash-loop.
        with self.assertRaises(Exception) as caught:
            chart_render.render({"controlPlane": {"httpPort": 7700}}, name=RELEASE, namespace=NAMESPACE)
        self.assertIn("controlPlane.httpPort (7700) must differ from controlPlane.grpcPort", str(caught.exception))
        with self.assertRaises(Exception) as caught:
            chart_render.render({"controlPlane": {"grpcPort": 7780}}, name=RELEASE, namespace=NAMESPACE)
        self.assertIn("controlPlane.httpPort (7780) must differ from controlPlane.grpcPort", str(caught.exception))

    def test_sidecar_ports_must_differ(self) -> None:
        # The sidecar's two listeners, and an http server's container
        # beside it, share the pod's network: a clash would crash-loop it.
        with self.assertRaises(Exception) as caught:
            chart_render.render({"sidecar": {"httpPort": 7702}}, name=RELEASE, namespace=NAMESPACE)
        self.assertIn("sidecar.httpPort (7702) must differ from sidecar.grpcPort", str(caught.exception))
        server = {"name": "web", "transport": "http", "image": {"repository": "x"}, "port": 7782}
        with self.assertRaises(Exception) as caught:
            chart_render.render({"servers": [server]}, name=RELEASE, namespace=NAMESPACE)
        self.assertIn("servers[web].port (7782) must differ from sidecar.grpcPort and sidecar.httpPort",
                      str(caught.exception))
        chart_render.render({"servers": [dict(server, port=8080)]}, name=RELEASE, namespace=NAMESPACE)

    def test_token_encryption_key_is_generated_once(self) -> None:
        s = one("embedded", "Secret", f"{RELEASE}-token-encryption")
        self.assertEqual(s["metadata"]["annotations"]["helm.sh/resource-policy"], "keep")
        key = base64.b64decode(base64.b64decode(s["data"]["token-encryption.key"]))
        self.assertEqual(len(key), 32)

    def test_bad_values_are_refused(self) -> None:
        cases = [
            ({"controlPlane": {"replica": 2}}, "additional properties 'replica' not allowed"),
            ({"servers": [{"name": "a b", "transport": "stdio", "image": {"repository": "x"},
                           "command": "y"}]}, "does not match pattern"),
            ({"servers": [{"name": "a", "transport": "stdio", "command": "y"}]}, "image"),
            ({"servers": [{"name": "a", "transport": "http", "url": "http://x/mcp",
                           "livenessIntervalSec": 86401}]}, "livenessIntervalSec"),
            ({"servers": [{"name": "a", "transport": "http", "image": {"repository": "x"}}]}, "port"),
            ({"servers": [{"name": "a_b", "transport": "http", "url": "http://x/mcp"},
                          {"name": "a-b", "transport": "http", "url": "http://y/mcp"}]},
             "get the same Kubernetes name"),
            ({"etcd": {"bundled": False}}, "needs etcd.externalEndpoints"),
            ({"tls": {"enabled": True}}, "tls.enabled needs"),
            ({"controlPlane": {"mcp": {"enabled": True, "tls": True}}}, "controlPlane.mcp.tls needs tls.enabled"),
            # Entries that could never match an Origin or a Host are refused
            # at render, not by a crash-looping pod.
            ({"controlPlane": {"mcp": {"allowedOrigins": ["https://*.example.com"]}}}, "does not match pattern"),
            ({"controlPlane": {"mcp": {"allowedOrigins": ["https://App.example.com"]}}}, "does not match pattern"),
            ({"controlPlane": {"mcp": {"allowedOrigins": ["https://a.example\u007f"]}}}, "does not match pattern"),
            ({"controlPlane": {"mcp": {"allowedOrigins": ["https://a.example:443"]}}},
             'browsers send an origin without its default port; write "https://a.example"'),
            ({"controlPlane": {"mcp": {"allowedOrigins": ["http://a.example:80"]}}}, 'write "http://a.example"'),
            ({"controlPlane": {"mcp": {"allowedHosts": ["gw.example:70000"]}}}, "does not match pattern"),
            ({"controlPlane": {"mcp": {"allowedHosts": ["https://gw.example"]}}}, "does not match pattern"),
            # A table set to null is dropped by Helm: the schema names it.
            ({"controlPlane": {"mcp": None}}, "at '/controlPlane': missing property 'mcp'"),
            ({"controlPlane": {"service": None}}, "missing property 'service'"),
            ({"auth": {"required": True}}, "nobody could call"),
            ({"lifecycle": {"preStopSleepSeconds": 40}},
             "controlPlane.terminationGracePeriodSeconds (40) must be larger"),
            ({"sidecar": {"graceSecs": 35}}, "sidecar.terminationGracePeriodSeconds (40) must be larger"),
            ({"lifecycle": {"preStopSleep": 5}}, "additional properties 'preStopSleep' not allowed"),
            ({"controlPlane": {"backgroundCalls": {"autoAfterSec": -1, "maxPerTarget": 1,
                                                   "maxDurationSec": 60, "retentionSec": 0}}}, "autoAfterSec"),
            ({"auth": {"mtls": [{"name": "e", "role": "engine"}]}}, "auth.mtls needs tls.clientAuth"),
            ({"auth": {"required": True, "tokens": [{"name": "e", "role": "engine", "value": "t"}]}, "servers": [
                {"name": "a", "transport": "http", "url": "http://x/mcp"}]}, "auth.sidecarToken"),
            ({"auth": {"tokens": [{"name": "e", "role": "engine", "value": "t", "servers": ["a"]}]}},
             "auth.tokens e: servers is only for a token of role sidecar"),
            ({"auth": {"tokens": [{"name": "s", "role": "sidecar", "value": "t", "servers": ["b"]}]}, "servers": [
                {"name": "a", "transport": "http", "url": "http://x/mcp", "sidecarToken": "s"}]},
             'servers a: its sidecar token "s" is bound to the servers [b], not to a'),
            ({"auth": {"tokens": [{"name": "e", "role": "engine", "value": "t"}]}, "servers": [
                {"name": "a", "transport": "http", "url": "http://x/mcp", "sidecarToken": "e"}]},
             'servers a: sidecarToken "e" must name an auth.tokens entry with role sidecar'),
            ({"servers": [{**HTTP, "headerSecrets": {"Authorization": {"secretName": "pat"}}}]},
             "at '/servers/0/headerSecrets/Authorization': missing property 'key'"),
            ({"servers": [{**HTTP, "headerSecrets": {"Authorization": {"key": "k"}}}]},
             "missing property 'secretName'"),
            ({"servers": [{**HTTP, "headerSecrets": {"Authorization": {"secretName": "pat", "key": ""}}}]},
             "/servers/0/headerSecrets/Authorization/key"),
            ({"servers": [{**HTTP, "headerSecrets": {"Bad Header": {"secretName": "pat", "key": "k"}}}]},
             "invalid propertyName 'Bad Header'"),
            ({"servers": [{**HTTP, "headerSecrets": {"..data": {"secretName": "pat", "key": "k"}}}]},
             "invalid propertyName '..data'"),
            ({"servers": [{"name": "a", "transport": "stdio", "image": {"repository": "x"}, "command": "y",
                           "headerSecrets": {"Authorization": {"secretName": "pat", "key": "k"}}}]},
             "'not' failed"),
            ({"servers": [{"name": "a", "transport": "stdio", "image": {"repository": "x"}, "command": "y",
                           "auth": "headers"}]}, "'not' failed"),
            ({"servers": [{**HTTP, "auth": "bearer"}]}, "at '/servers/0/auth': value must be one of"),
            ({"servers": [{**HTTP, "auth": "none", "headerSecrets": {"A": {"secretName": "s", "key": "k"}}}]},
             'servers "a": auth is "none" but headers or headerSecrets are set'),
            ({"servers": [{**HTTP, "auth": "headers"}]},
             'servers "a": auth is "headers" but neither headers nor headerSecrets has an entry'),
            ({"servers": [{**HTTP, "headers": {"authorization": "x"},
                           "headerSecrets": {"Authorization": {"secretName": "s", "key": "k"}}}]},
             'servers "a": header "authorization" is in both headers and headerSecrets'),
            ({"store": {"tokenEncryption": {"previousKeys": [{"secretName": "old-key"}]}}},
             "at '/store/tokenEncryption/previousKeys/0': missing property 'key'"),
            ({"store": {"tokenEncryption": {"previousKeys": [{"key": "k"}]}}},
             "at '/store/tokenEncryption/previousKeys/0': missing property 'secretName'"),
            ({"store": {"tokenEncryption": {"previousKeys": [{"secretName": "Old_Key", "key": "k"}]}}},
             "at '/store/tokenEncryption/previousKeys/0/secretName'"),
            ({"store": {"tokenEncryption": {"previousKeys": [{"secretName": "old-key", "key": "a/b"}]}}},
             "at '/store/tokenEncryption/previousKeys/0/key'"),
            ({"store": {"tokenEncryption": {"previousKeys": [{"secretName": "old-key", "key": "k",
                                                              "value": "c2VjcmV0"}]}}},
             "additional properties 'value' not allowed"),
            ({"store": {"tokenEncryption": {"previousKeys": ["old-key"]}}},
             "at '/store/tokenEncryption/previousKeys/0'"),
            ({"store": {"tokenEncryption": {"previousKeys": [{"secretName": "old-key", "key": "k"},
                                                             {"secretName": "old-key", "key": "k"}]}}},
             "at '/store/tokenEncryption/previousKeys': items at 0 and 1 are equal"),
            ({"store": {"tokenEncryption": {"enabled": False,
                                            "previousKeys": [{"secretName": "old-key", "key": "k"}]}}},
             "store.tokenEncryption.previousKeys needs store.tokenEncryption.enabled"),
            ({"store": {"tokenEncryption": {"existingSecret": "key-2", "previousKeys": [
                {"secretName": "old-key", "key": "token-encryption.key"},
                {"secretName": "key-2", "key": "token-encryption.key"}]}}},
             'store.tokenEncryption.previousKeys[1] (Secret "key-2", key "token-encryption.key") is the active key'),
            ({"store": {"tokenEncryption": {"secretKey": "previous-1.key", "previousKeys": [
                {"secretName": "old-key", "key": "k"}]}}},
             'store.tokenEncryption.secretKey "previous-1.key" is also the file of previousKeys[0]'),
            ({"servers": [{**HTTP, "headerSecrets": {"X-A": {"secretName": "s", "key": "k"},
                                                     "x-a": {"secretName": "s", "key": "k"}}}]},
             'servers "a": headerSecrets "X-A" and "x-a" are the same header'),
            # OAuth servers: the render's own checks.
            ({"servers": [{**STDIO, "oauth": {"scopes": ["read"]}}]},
             'servers "a": auth "oauth" and oauth are only for http servers'),
            ({"servers": [{**STDIO, "auth": "oauth"}]},
             'servers "a": auth "oauth" and oauth are only for http servers'),
            ({"servers": [{**HTTP, "oauth": {"scopes": ["read"]}}]},
             'servers "a": oauth is set but auth is not "oauth": set auth to "oauth"'),
            ({"servers": [{**HTTP, "auth": "headers", "headers": {"X-A": "b"}, "oauth": {"clientId": "c"}}]},
             'servers "a": oauth is set but auth is not "oauth"'),
            ({"store": {"tokenEncryption": {"enabled": False}}, "servers": [{**HTTP, "auth": "oauth"}]},
             'servers "a": auth "oauth" needs store.tokenEncryption.enabled'),
            ({"servers": [{**HTTP, "auth": "oauth", "oauth": {"clientSecret": {"secretName": "s", "key": "k"}}}]},
             'servers "a": oauth.clientSecret needs oauth.clientId'),
            ({"servers": [{**HTTP, "auth": "oauth", "headers": {"authorization": "Bearer x"}}]},
             'servers "a": auth is "oauth" but "authorization" is in headers or headerSecrets'),
            ({"servers": [{**HTTP, "auth": "oauth", "headers": {"X-Team": "t"},
                           "headerSecrets": {"Authorization": {"secretName": "s", "key": "k"}}}]},
             'servers "a": auth is "oauth" but "Authorization" is in headers or headerSecrets'),
            # OAuth values: the schema.
            ({"servers": [{**HTTP, "auth": "oauth", "oauth": {"client_id": "c"}}]},
             "additional properties 'client_id' not allowed"),
            ({"servers": [{**HTTP, "auth": "oauth", "oauth": {"clientId": " "}}]},
             "at '/servers/0/oauth/clientId'"),
            ({"servers": [{**HTTP, "auth": "oauth", "oauth": {"clientId": "c", "clientSecret": "hunter2"}}]},
             "at '/servers/0/oauth/clientSecret'"),
            ({"servers": [{**HTTP, "auth": "oauth", "oauth": {"clientId": "c",
                                                              "clientSecret": {"secretName": "s"}}}]},
             "at '/servers/0/oauth/clientSecret': missing property 'key'"),
            ({"servers": [{**HTTP, "auth": "oauth", "oauth": {"scopes": ["read write"]}}]},
             "at '/servers/0/oauth/scopes/0'"),
            ({"servers": [{**HTTP, "auth": "oauth", "oauth": {"scopes": "read"}}]},
             "at '/servers/0/oauth/scopes'"),
            ({"servers": [{**HTTP, "auth": "oauth", "oauth": {"clientMetadataUrl": "http://x.example/c.json"}}]},
             "at '/servers/0/oauth/clientMetadataUrl'"),
            ({"servers": [{**HTTP, "auth": "oauth", "oauth": {"clientMetadataUrl": "https://x.example/"}}]},
             "at '/servers/0/oauth/clientMetadataUrl'"),
            ({"servers": [{**HTTP, "auth": "oauth", "oauth": {"allowUnadvertisedPkce": "yes"}}]},
             "at '/servers/0/oauth/allowUnadvertisedPkce'"),
            ({"oauth": {"adminBaseUrl": "switchyard.example.com"}}, "at '/oauth/adminBaseUrl'"),
            ({"oauth": {"adminBaseUrl": "https://switchyard.example.com/?a=b"}}, "at '/oauth/adminBaseUrl'"),
            ({"oauth": {"allowPrivateAddresses": "true"}}, "at '/oauth/allowPrivateAddresses'"),
            ({"oauth": {"admin_base_url": "https://x"}}, "additional properties 'admin_base_url' not allowed"),
            # The MCP endpoint: the ranges [mcp] enforces, and a free port.
            ({"controlPlane": {"mcp": {"enabled": True, "port": 7780}}},
             "controlPlane.mcp.port (7780) must differ from controlPlane.grpcPort, controlPlane.httpPort and controlPlane.metricsPort"),
            ({"controlPlane": {"metricsPort": 7700}},
             "controlPlane.metricsPort (7700) must differ from controlPlane.grpcPort and controlPlane.httpPort"),
            ({"controlPlane": {"metricsPort": 0}}, "at '/controlPlane/metricsPort'"),
            ({"controlPlane": {"mcp": {"maxBodyBytes": 512}}}, "at '/controlPlane/mcp/maxBodyBytes'"),
            ({"controlPlane": {"mcp": {"bodyTimeoutSec": 0}}}, "at '/controlPlane/mcp/bodyTimeoutSec'"),
            ({"controlPlane": {"mcp": {"sessionIdleTimeoutSec": 59}}},
             "at '/controlPlane/mcp/sessionIdleTimeoutSec'"),
            ({"controlPlane": {"mcp": {"maxSessionsPerCaller": 0}}},
             "at '/controlPlane/mcp/maxSessionsPerCaller'"),
            ({"controlPlane": {"mcp": {"maxWaitingCallsPerCaller": 100001}}},
             "at '/controlPlane/mcp/maxWaitingCallsPerCaller'"),
            ({"controlPlane": {"mcp": {"requestStateTtlSec": 86401}}}, "at '/controlPlane/mcp/requestStateTtlSec'"),
            ({"controlPlane": {"mcp": {"maxConnections": 0}}}, "at '/controlPlane/mcp/maxConnections'"),
            ({"controlPlane": {"maxConnections": 1000001}}, "at '/controlPlane/maxConnections'"),
            ({"controlPlane": {"idleTimeoutSec": 0}}, "at '/controlPlane/idleTimeoutSec'"),
            ({"controlPlane": {"idleTimeoutSec": 86401}}, "at '/controlPlane/idleTimeoutSec'"),
            ({"controlPlane": {"mcp": {"allowedOrigins": ["https://x.example/app"]}}},
             "at '/controlPlane/mcp/allowedOrigins/0'"),
            ({"controlPlane": {"mcp": {"allowedOrigins": ["x.example"]}}}, "at '/controlPlane/mcp/allowedOrigins/0'"),
            ({"controlPlane": {"mcp": {"listen": "0.0.0.0:7701"}}}, "additional properties 'listen' not allowed"),
        ]
        for values, message in cases:
            with self.subTest(values=values):
                with self.assertRaises(Exception) as caught:
                    chart_render.render(values, name=RELEASE, namespace=NAMESPACE)
                self.assertIn(message, str(caught.exception))


HTTP = {"name": "a", "transport": "http", "url": "http://x/mcp"}
STDIO = {"name": "a", "transport": "stdio", "image": {"repository": "x"}, "command": "y"}


def merge_values(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    return chart_render.merge(base, over)


def cp_config(value_set: str) -> str:
    return one(value_set, "ConfigMap", f"{RELEASE}-config")["data"]["switchyard.toml"]


def sidecar_config(value_set: str, slug: str) -> str:
    return one(value_set, "ConfigMap", f"{RELEASE}-{slug}-sidecar")["data"]["sidecar.toml"]


def materialise(value_set: str, pod: dict[str, Any], container: dict[str, Any],
                root: pathlib.Path, external: dict[str, dict[str, str]] | None = None) -> list[str]:
    """Lays out `container`'s volume mounts under `root` as the kubelet
    would: ConfigMap and Secret volumes become files (the chart's rendered
    objects, or the existing Secrets the values name), other volumes empty
    directories. Returns the mount paths."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    configmaps = {c["metadata"]["name"]: c.get("data", {}) for c in find(value_set, "ConfigMap")}
    secrets = {s["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in s.get("data", {}).items()}
               for s in find(value_set, "Secret")}
    secrets = {**(existing_secrets() if external is None else external), **secrets}
    mounts = []
    for m in container.get("volumeMounts", []):
        target = root / m["mountPath"].lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        mounts.append(m["mountPath"])
        v = volumes[m["volumeName"] if "volumeName" in m else m["name"]]
        if "configMap" in v:
            sources = [(configmaps[v["configMap"]["name"]], v["configMap"].get("items"))]
        elif "secret" in v:
            sources = [(secrets[v["secret"]["secretName"]], v["secret"].get("items"))]
        elif "projected" in v:
            sources = [(secrets[s["secret"]["name"]], s["secret"].get("items"))
                       for s in v["projected"]["sources"]]
        else:
            continue
        for data, items in sources:
            pairs = [(i["key"], i["path"]) for i in items] if items else [(k, k) for k in data]
            for key, path in pairs:
                (target / path).write_text(data[key])
    return mounts


def rebase(text: str, mounts: list[str], root: pathlib.Path) -> str:
    """Points the configuration's quoted absolute paths under a mount at
    the same file below `root` (each path once, by its longest mount)."""

    def move(m: re.Match[str]) -> str:
        path = m.group(1)
        if any(path == mount or path.startswith(mount.rstrip("/") + "/") for mount in mounts):
            return json.dumps(str(root) + path)
        return m.group(0)

    return re.sub(r'"(/[^"]*)"', move, text)


class BinariesAcceptRenderedConfigs(unittest.TestCase):
    """`switchyard check-config` and `switchyard-sidecar check-config`
    accept every configuration the chart renders, with the files it names
    in place."""

    def check_run(self, value_set: str, pod: dict[str, Any], container: dict[str, Any],
                  command: list[str], external: dict[str, dict[str, str]] | None = None
                  ) -> tuple[subprocess.CompletedProcess[str], str, str]:
        args = container["args"]
        config_path = args[args.index("--config") + 1]
        with tempfile.TemporaryDirectory() as d:
            root = pathlib.Path(d)
            mounts = materialise(value_set, pod, container, root, external)
            config = root / config_path.lstrip("/")
            config.write_text(rebase(config.read_text(), mounts, root))
            return run([*command, str(config)]), config_path, config.read_text()

    def check(self, value_set: str, pod: dict[str, Any], container: dict[str, Any],
              command: list[str]) -> None:
        r, config_path, text = self.check_run(value_set, pod, container, command)
        self.assertEqual(r.returncode, 0,
                         f"{value_set}: {' '.join(command)} {config_path}:\n{r.stderr}\n"
                         f"--- the file:\n{text}")
        self.assertIn(": ok", r.stdout)

    def test_the_check_sees_the_mounted_files(self) -> None:
        """The same check fails when a Secret holds no certificate: the
        files really are read, so a pass above means something."""
        broken = existing_secrets()
        broken = {name: {**data, "tls.crt": "not a certificate\n"} for name, data in broken.items()}
        cp = one("tls", "Deployment", RELEASE)["spec"]["template"]["spec"]
        r, _, _ = self.check_run("tls", cp, cp["containers"][0], [str(bin_dir() / "switchyard"), "check-config"],
                                 broken)
        self.assertEqual(r.returncode, 64, r.stdout + r.stderr)
        self.assertIn("tls.cert_file", r.stderr)
        pod = one("tls", "Deployment", f"{RELEASE}-orders")["spec"]["template"]["spec"]
        r, _, _ = self.check_run("tls", pod, pod["containers"][1],
                                 [str(bin_dir() / "switchyard-sidecar"), "check-config", "--config"], broken)
        self.assertEqual(r.returncode, 64, r.stdout + r.stderr)
        self.assertIn("tls_cert_file", r.stderr)

    def test_the_check_reads_the_secret_header_files(self) -> None:
        """The sidecar's check reads the mounted header files: it passes
        without showing a value, and fails on a bad one naming the key and
        the file, never the content."""
        pod = one("header-secrets", "Deployment", f"{RELEASE}-github")["spec"]["template"]["spec"]
        sidecar = [str(bin_dir() / "switchyard-sidecar"), "check-config", "--config"]
        r, _, _ = self.check_run("header-secrets", pod, pod["containers"][0], sidecar)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn(SENTINEL, r.stdout + r.stderr)
        broken = existing_secrets()
        broken["github-pat"] = {"authorization": f"Bearer {SENTINEL}\nsecond line\n"}
        r, _, _ = self.check_run("header-secrets", pod, pod["containers"][0], sidecar, broken)
        self.assertEqual(r.returncode, 64, r.stdout + r.stderr)
        self.assertIn("server.header_files.Authorization", r.stderr)
        self.assertIn("/etc/switchyard/header-secrets/Authorization", r.stderr)
        self.assertNotIn(SENTINEL, r.stdout + r.stderr)
        # The control plane keeps the paths only: its check reads no header file.
        cp = one("header-secrets", "Deployment", RELEASE)["spec"]["template"]["spec"]
        self.assertNotIn("header-secrets", [m["name"] for m in cp["containers"][0]["volumeMounts"]])
        self.check("header-secrets", cp, cp["containers"][0], [str(bin_dir() / "switchyard"), "check-config"])

    def test_the_check_reads_the_previous_key_files(self) -> None:
        """The control plane's check opens every previous key file mounted
        from its Secret: a key that is not 32 bytes fails it, naming the
        configuration key and the file, never the content."""
        cp = one("key-rotation", "Deployment", RELEASE)["spec"]["template"]["spec"]
        command = [str(bin_dir() / "switchyard"), "check-config"]
        self.check("key-rotation", cp, cp["containers"][0], command)
        broken = existing_secrets()
        short = base64.b64encode(b"\x01" * 31).decode()
        broken["switchyard-token-encryption"] = {"token-encryption.key": short + "\n"}
        r, _, _ = self.check_run("key-rotation", cp, cp["containers"][0], command, broken)
        self.assertEqual(r.returncode, 64, r.stdout + r.stderr)
        self.assertIn("store.token_encryption_previous_key_files", r.stderr)
        self.assertIn("/etc/switchyard/keys/previous-2.key", r.stderr)
        self.assertNotIn(short, r.stdout + r.stderr)

    def test_the_oauth_client_secret_is_a_file_of_the_control_plane(self) -> None:
        """The file [servers.oauth] client_secret_file names is where the
        control plane's mount puts the Secret's key; the check accepts the
        configuration without showing it, and the sidecar's check accepts
        its [server.oauth] copy, which names no file."""
        cp = one("oauth", "Deployment", RELEASE)["spec"]["template"]["spec"]
        with tempfile.TemporaryDirectory() as d:
            root = pathlib.Path(d)
            materialise("oauth", cp, cp["containers"][0], root)
            self.assertIn('client_secret_file = "/etc/switchyard/oauth-client-secrets/linear"', cp_config("oauth"))
            self.assertEqual((root / "etc/switchyard/oauth-client-secrets/linear").read_text(),
                             existing_secrets()["linear-oauth-client"]["client-secret"])
        r, _, _ = self.check_run("oauth", cp, cp["containers"][0], [str(bin_dir() / "switchyard"), "check-config"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn(SENTINEL, r.stdout + r.stderr)
        for slug in ["linear", "notes", "plain"]:
            pod = one("oauth", "Deployment", f"{RELEASE}-{slug}")["spec"]["template"]["spec"]
            sidecar = next(c for c in pod["containers"] if c["name"] == "sidecar")
            self.check("oauth", pod, sidecar, [str(bin_dir() / "switchyard-sidecar"), "check-config", "--config"])

    def test_every_rendered_config_passes_check_config(self) -> None:
        switchyard = bin_dir() / "switchyard"
        sidecar = bin_dir() / "switchyard-sidecar"
        for b in (switchyard, sidecar):
            self.assertTrue(b.exists(), f"{b} is missing: run cargo build --workspace --bins")
        for value_set in VALUE_SETS:
            checked = 0
            for d in find(value_set, "Deployment"):
                pod = d["spec"]["template"]["spec"]
                component = d["metadata"]["labels"]["app.kubernetes.io/component"]
                for c in pod["containers"]:
                    with self.subTest(value_set=value_set, deployment=d["metadata"]["name"], container=c["name"]):
                        if component == "control-plane":
                            self.check(value_set, pod, c, [str(switchyard), "check-config"])
                            checked += 1
                        elif c.get("command", [""])[0].endswith("/switchyard-sidecar"):
                            self.check(value_set, pod, c, [str(sidecar), "check-config", "--config"])
                            checked += 1
            servers = len(values_for(value_set).get("servers", []))
            self.assertEqual(checked, 1 + servers, value_set)


def known_metrics() -> set[str]:
    """Metric names docs/metrics.md lists or the code registers."""
    names = set(re.findall(r"`(switchyard_[a-z0-9_]+)`", (ROOT / "docs" / "metrics.md").read_text()))
    for src in [*(ROOT / "control-plane" / "src").rglob("*.rs"), *(ROOT / "sidecar" / "src").rglob("*.rs")]:
        names.update(re.findall(r'"(switchyard_[a-z0-9_]+)"', src.read_text()))
    return names


class Dashboard(unittest.TestCase):
    path = CHART / "dashboards" / "switchyard.json"

    def exprs(self) -> list[str]:
        dash = json.loads(self.path.read_text())
        out = []

        def walk(panels: list[dict[str, Any]]) -> None:
            for p in panels:
                out.extend(t["expr"] for t in p.get("targets", []))
                walk(p.get("panels", []))

        walk(dash["panels"])
        out.extend(v["definition"] for v in dash["templating"]["list"] if "definition" in v)
        return out

    def test_valid_json_with_unique_panel_ids(self) -> None:
        dash = json.loads(self.path.read_text())
        self.assertEqual(dash["uid"], "switchyard-overview")
        ids = [p["id"] for p in dash["panels"]]
        self.assertEqual(len(ids), len(set(ids)))

    def test_every_metric_exists(self) -> None:
        known = known_metrics()
        self.assertIn("switchyard_control_plane_calls_total", known)  # the scan works
        used = set()
        for expr in self.exprs():
            for name in re.findall(r"\bswitchyard_[a-z0-9_]+", expr):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                self.assertTrue(name in known or base in known, f"{name} in {expr!r} is not a known metric")
                used.add(base if base in known else name)
        # What the dashboard is for.
        for needed in ["switchyard_control_plane_calls_total", "switchyard_control_plane_call_duration_seconds",
                       "switchyard_control_plane_sidecars_up", "switchyard_sidecar_background_calls",
                       "switchyard_sidecar_task_polls_total", "switchyard_control_plane_interactions_total",
                       "switchyard_sidecar_list_changed_received_total",
                       "switchyard_sidecar_catalogue_refreshes_total"]:
            self.assertIn(needed, used)
        self.assertTrue(any("histogram_quantile" in e for e in self.exprs()))

    def test_shipped_as_a_configmap(self) -> None:
        cm = one("etcd-bundled", "ConfigMap", f"{RELEASE}-dashboard")
        self.assertEqual(cm["metadata"]["labels"]["grafana_dashboard"], "1")
        self.assertEqual(json.loads(cm["data"]["switchyard.json"]), json.loads(self.path.read_text()))
        self.assertEqual(find("embedded", "ConfigMap", f"{RELEASE}-dashboard"), [])


if __name__ == "__main__":
    unittest.main()
