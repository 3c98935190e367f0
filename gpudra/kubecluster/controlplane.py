"""The real control plane of a local cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

Each component is a process of the binary `build` made (its own session, log and pid file under DIR/kube/), bound to
127.0.0.1 only: etcd on plain HTTP (no one else on the machine should reach it, and only the API server talks to
it), the API server on TLS with client certificates (kubeadm's layout: one CA, `pki.Write` in k8s/pki), RBAC, and
the release's DRA feature gates as the cluster's `--features` set them (one set for all three components, as
kubeadm passes them). Ports are picked once, when the cluster is created, and kept in DIR/kube/endpoints.json, so
a restarted component comes back where its clients look for it.

The ServiceAccount admission plugin is off: it refuses a pod in a namespace whose `default` ServiceAccount the
controller-manager has not created yet (a race every `kubectl apply -f` of a new namespace and its pods would lose
now and then), and no container of a simulated node reads a token.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from typing import Callable, Mapping, Sequence

from gpudra.atomicfile import write_atomic
from gpudra.cluster.layout import ClusterConfig, ClusterDir, ClusterSetupError
from gpudra.cluster.processes import process_alive, stop_process
from gpudra.cluster.store import FILE_MODE, open_private, private_dirs

from .build import Built

SERVICE_CIDR = "10.0.0.0/24"
READY_TIMEOUT_S = 120.0  # a cold API server on a loaded 2-core machine installs its bootstrap objects in ~20 s
POLL_S = 0.1
# stopped in this order: the consumers of the API first, etcd last
COMPONENTS = ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")


@dataclass(frozen=True)
class Endpoints:
    etcd_client: int
    etcd_peer: int
    apiserver: int

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver}"


class KubePaths:
    """Where the real control plane keeps its files inside the cluster directory."""

    def __init__(self, cluster: ClusterDir):
        self.root = os.path.join(cluster.path, "kube")
        self.pki = os.path.join(self.root, "pki")
        self.etcd_data = os.path.join(self.root, "etcd")
        self.endpoints = os.path.join(self.root, "endpoints.json")
        self.binary_link = os.path.join(self.root, "bin")
        self.admin_kubeconfig = os.path.join(cluster.path, "kubeconfig")

    def kubeconfig(self, component: str) -> str:
        return os.path.join(self.root, f"{component}.kubeconfig")

    def log(self, component: str) -> str:
        return os.path.join(self.root, f"{component}.log")

    def pid(self, component: str) -> str:
        return os.path.join(self.root, f"{component}.pid")

    def cert(self, stem: str) -> str:
        return os.path.join(self.pki, f"{stem}.crt")

    def key(self, stem: str) -> str:
        return os.path.join(self.pki, f"{stem}.key")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def endpoints(paths: KubePaths) -> Endpoints:
    """The cluster's ports: chosen on first use, then read back."""
    try:
        with open(paths.endpoints, encoding="utf-8") as f:
            return Endpoints(**json.load(f))
    except FileNotFoundError:
        pass
    except (OSError, ValueError, TypeError) as exc:
        raise ClusterSetupError(f"{paths.endpoints}: {exc}") from None
    chosen = Endpoints(etcd_client=_free_port(), etcd_peer=_free_port(), apiserver=_free_port())
    write_atomic(paths.endpoints, json.dumps(asdict(chosen)).encode(), mode=FILE_MODE, label="kube-endpoints",
                 fsync=False)
    return chosen


def kubeconfig_text(server: str, ca: str, cert: str, key: str, user: str) -> str:
    """A kubeconfig with one cluster, user and context, all named `gpudra` (JSON is YAML: no dumper needed)."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "gpudra",
        "clusters": [{"name": "gpudra", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": user, "user": {"client-certificate": cert, "client-key": key}}],
        "contexts": [{"name": "gpudra", "context": {"cluster": "gpudra", "user": user}}],
    }
    return json.dumps(config, indent=2) + "\n"


def _write_kubeconfigs(paths: KubePaths, ports: Endpoints) -> None:
    for component, stem, target in (("admin", "admin", paths.admin_kubeconfig),
                                    ("kube-controller-manager", "controller-manager",
                                     paths.kubeconfig("kube-controller-manager")),
                                    ("kube-scheduler", "scheduler", paths.kubeconfig("kube-scheduler"))):
        text = kubeconfig_text(ports.server, paths.cert("ca"), paths.cert(stem), paths.key(stem), component)
        write_atomic(target, text.encode(), mode=FILE_MODE, label="kubeconfig", fsync=False)


def feature_gates_flag(config: ClusterConfig) -> str:
    from gpudra.allocator.features import FEATURE_NAMES
    from gpudra.versions import VersionError, component_feature_gates

    features = config.feature_gates()
    enabled = set(features.enabled())
    try:
        gates = component_feature_gates(config.kubernetes_version, {n: n in enabled for n in FEATURE_NAMES})
    except VersionError as exc:
        raise ClusterSetupError(f"--features: {exc}") from None
    from gpudra.versions import gate_state

    for gate, on in features.other_gates:  # DRAExtendedResource and the other gates no allocator feature names
        if gate_state(gate, config.kubernetes_version).stage is None:
            raise ClusterSetupError(f"--features: Kubernetes {config.kubernetes_version} has no {gate} feature gate")
        if gate_state(gate, config.kubernetes_version).stage != "GA":
            gates[gate] = on
    return ",".join(f"{gate}={'true' if on else 'false'}" for gate, on in sorted(gates.items()))


def runtime_config(config: ClusterConfig) -> str:
    """API versions to serve beyond the release's defaults: DeviceTaintRule (resource.k8s.io/v1alpha3 in 1.34,
    v1beta2 from 1.36) where DRADeviceTaints is on but its API is opt-in; the Workload API (scheduling.k8s.io
    v1alpha1 in 1.35, v1alpha2 in 1.36: alpha, off by default) where GenericWorkload is on."""
    from gpudra.api.schema.workload import SERVED_IN
    from gpudra.versions import gate_state

    features = config.feature_gates()
    versions = []
    if "DeviceTaints" in features.enabled() and gate_state("DRADeviceTaints", config.kubernetes_version).stage == "alpha":
        versions.append("resource.k8s.io/v1alpha3=true")
    if features.gate_enabled("GenericWorkload"):
        versions += [f"{api}=true" for api, release in SERVED_IN.items() if release == config.kubernetes_version]
    return ",".join(versions)


def with_flags(args: list[str], extra: Sequence[str]) -> list[str]:
    """`args` with `extra` appended, an extra `--flag=value` replacing the same flag in `args` (list flags such as
    --disable-admission-plugins would otherwise add up rather than replace)."""
    names = {flag.split("=", 1)[0] for flag in extra}
    return [arg for arg in args if arg.split("=", 1)[0] not in names] + list(extra)


def component_args(component: str, config: ClusterConfig, paths: KubePaths, ports: Endpoints) -> list[str]:
    gates = f"--feature-gates={feature_gates_flag(config)}"
    if component == "etcd":
        peer = f"http://127.0.0.1:{ports.etcd_peer}"
        client = f"http://127.0.0.1:{ports.etcd_client}"
        return ["--name=gpudra", f"--data-dir={paths.etcd_data}", f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}", f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}", f"--initial-cluster=gpudra={peer}",
                "--log-level=warn"]
    if component == "kube-apiserver":
        args = [f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}", "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1", f"--secure-port={ports.apiserver}",
                f"--tls-cert-file={paths.cert('apiserver')}", f"--tls-private-key-file={paths.key('apiserver')}",
                f"--client-ca-file={paths.cert('ca')}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={paths.pki}/sa.pub",
                f"--service-account-signing-key-file={paths.pki}/sa.key",
                f"--service-cluster-ip-range={SERVICE_CIDR}", "--authorization-mode=RBAC",
                "--disable-admission-plugins=ServiceAccount", "--allow-privileged=true", "--profiling=false",
                f"--event-ttl={config.event_ttl_s}s", f"--cert-dir={paths.root}/apiserver-certs", gates]
        extra = runtime_config(config)
        return args + ([f"--runtime-config={extra}"] if extra else [])
    common = [f"--kubeconfig={paths.kubeconfig(component)}", f"--authentication-kubeconfig={paths.kubeconfig(component)}",
              f"--authorization-kubeconfig={paths.kubeconfig(component)}", "--leader-elect=false",
              "--bind-address=127.0.0.1", "--secure-port=0", "--profiling=false", gates]
    if component == "kube-controller-manager":
        return common + [f"--service-account-private-key-file={paths.pki}/sa.key",
                         f"--root-ca-file={paths.cert('ca')}", "--use-service-account-credentials=true",
                         f"--cluster-signing-cert-file={paths.cert('ca')}",
                         f"--cluster-signing-key-file={paths.key('ca')}", "--controllers=*"]
    if component == "kube-scheduler":
        return common
    raise ValueError(component)


def alive(paths: KubePaths, component: str) -> int | None:
    """The component's pid if it runs: the pid file's process, with the component's name as its first argument
    and this cluster's kube directory as its working directory (a recycled pid is someone else's)."""
    pid = process_alive(paths.pid(component), component)
    try:
        return pid if pid is not None and os.readlink(f"/proc/{pid}/cwd") == paths.root else None
    except OSError:
        return None


def _spawn(binary: str, component: str, args: list[str], paths: KubePaths) -> subprocess.Popen[bytes]:
    log = open_private(paths.log(component), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        process = subprocess.Popen([binary, component, *args], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   start_new_session=True, cwd=paths.root, umask=0o077)
    finally:
        os.close(log)
    write_atomic(paths.pid(component), f"{process.pid}\n".encode(), mode=FILE_MODE, label="kube-pid", fsync=False)
    return process


def _tail(path: str, lines: int = 8) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 16384))
            return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-lines:])
    except OSError:
        return ""


def _wait(check: Callable[[], bool], process: subprocess.Popen[bytes] | None, component: str, paths: KubePaths) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not check():
        if process is not None and process.poll() is not None:
            raise ClusterSetupError(f"{component} exited ({process.returncode}); {paths.log(component)}:\n"
                                    f"{_tail(paths.log(component))}")
        if time.monotonic() > deadline:
            raise ClusterSetupError(f"{component} not ready after {READY_TIMEOUT_S:.0f}s; see {paths.log(component)}")
        time.sleep(POLL_S)


def _etcd_healthy(ports: Endpoints) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ports.etcd_client}/health", timeout=2) as answer:
            return bool(json.load(answer).get("health") == "true")
    except (OSError, ValueError):
        return False


def tls_context(paths: KubePaths) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=paths.cert("ca"))
    context.load_cert_chain(paths.cert("admin"), paths.key("admin"))
    return context


def apiserver_ready(paths: KubePaths, ports: Endpoints) -> bool:
    try:
        with urllib.request.urlopen(f"{ports.server}/readyz", timeout=5, context=tls_context(paths)) as answer:
            status: int = answer.status  # urlopen's answer is untyped: an HTTPResponse here
            return status == 200
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return False


def start(cluster: ClusterDir, config: ClusterConfig, built: Built, say: Callable[[str], None] = lambda _: None,
          components: tuple[str, ...] = COMPONENTS, extra_args: Mapping[str, Sequence[str]] | None = None) -> Endpoints:
    """Start whatever component of the control plane is not running (of `components`: etcd and the API server
    alone serve a test that only writes objects); returns its endpoints once the API server is ready.
    Certificates and ports are made on the first start and kept. `extra_args` adds or replaces flags per component
    (a benchmark's client QPS, upstream scheduler_perf's admission plugins)."""
    paths = KubePaths(cluster)
    private_dirs(paths.root)
    if not os.path.exists(paths.cert("admin")):
        result = subprocess.run([built.binary, "pki", paths.pki], check=False, capture_output=True, text=True)
        if result.returncode != 0:
            raise ClusterSetupError(f"writing the cluster's certificates failed: {result.stderr.strip()}")
    ports = endpoints(paths)
    _write_kubeconfigs(paths, ports)
    if os.path.lexists(paths.binary_link):
        os.unlink(paths.binary_link)
    os.symlink(os.path.dirname(built.binary), paths.binary_link)  # DIR/kube/bin/kubectl is the release's kubectl
    for component in reversed(COMPONENTS):
        if component not in components or alive(paths, component) is not None:
            continue
        args = with_flags(component_args(component, config, paths, ports), (extra_args or {}).get(component, ()))
        process = _spawn(built.binary, component, args, paths)
        if component == "etcd":
            _wait(lambda: _etcd_healthy(ports), process, component, paths)
        elif component == "kube-apiserver":
            _wait(lambda: apiserver_ready(paths, ports), process, component, paths)
        say(f"{component} {built.release} started (log {paths.log(component)})")
    return ports


def stop(cluster: ClusterDir, say: Callable[[str], None] = lambda _: None,
         components: tuple[str, ...] = COMPONENTS) -> None:
    paths = KubePaths(cluster)
    for component in (c for c in COMPONENTS if c in components):
        if alive(paths, component) is not None and stop_process(paths.pid(component), component):
            say(f"{component} stopped")
