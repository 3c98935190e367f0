"""`gpudra driver webhook`, `compute-domain-controller`, `compute-domain-daemon`: the driver's cluster-side
processes (NVIDIA's cmd/webhook, cmd/compute-domain-controller, cmd/compute-domain-daemon)."""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

import click

from gpudra.vocabulary import DRIVER_NAME
from gpudra.cli.options import dns_subdomain_value
from gpudra.cli.driver_options import fail
from gpudra.computedomain.daemonstatus import MAX_NODES_PER_IMEX_DOMAIN

if TYPE_CHECKING:
    from gpudra.kubecluster.rest import Rest


@click.command("webhook")
@click.option("--tls-cert-file", required=True, type=click.Path(dir_okay=False), metavar="PATH",
              help="x509 certificate for HTTPS (PEM; a CA certificate, if any, concatenated after it)")
@click.option("--tls-private-key-file", required=True, type=click.Path(dir_okay=False), metavar="PATH",
              help="the private key matching --tls-cert-file (PEM)")
@click.option("--port", type=click.IntRange(0, 65535), default=443, show_default=True,
              help="HTTPS port (0: any free port, printed on stderr)")
@click.option("--bind-address", default="", metavar="ADDRESS", help="address to listen on (default: all)")
@click.option("--driver-name", default=DRIVER_NAME, show_default=True, callback=dns_subdomain_value(63),
              help="check the opaque configs of this driver; other drivers' configs are let through")
@click.option("-v", "--verbose", is_flag=True, help="Log every admission review at debug level.")
def webhook_cmd(tls_cert_file: str, tls_private_key_file: str, port: int, bind_address: str, driver_name: str,
                verbose: bool) -> None:
    """Serve the validating admission webhook: refuse ResourceClaims, ResourceClaimTemplates and DeviceClasses whose
    GpuConfig / MigDeviceConfig the driver would refuse at prepare time: `gpudra validate`'s checks of those opaque configs only
    (the rest of the object, its selectors included, is the API server's to check; `gpudra validate` does both).

    POST /validate-resource-claim-parameters takes an admission.k8s.io/v1 AdmissionReview; GET /readyz answers
    ok. deploy/kubernetes/webhook.yaml registers it (the chart: --set webhook.enabled=true)."""
    from gpudra.webhook.server import WebhookError, WebhookServer

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        server = WebhookServer((bind_address, port), tls_cert_file, tls_private_key_file, driver_name)
    except WebhookError as exc:
        fail(str(exc))
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    click.echo(f"ready: https://{bind_address or '0.0.0.0'}:{server.port}", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def _cluster_process(kubeconfig: str | None, in_cluster: bool, verbose: bool) -> tuple["Rest", threading.Event]:
    """What a compute-domain process (controller or daemon) starts with: logging on stderr, the API server's
    client, and an event SIGTERM sets."""
    from kubernetes.config import ConfigException

    from gpudra.kubecluster.rest import Rest

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        rest = Rest(kubeconfig, in_cluster=in_cluster)
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        fail(f"cannot load the cluster configuration: {exc}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return rest, stop


@click.command("compute-domain-controller")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), envvar="KUBECONFIG",
              help="the cluster whose ComputeDomains to reconcile")
@click.option("--in-cluster", is_flag=True, help="use the pod's service account")
@click.option("--interval", "interval_s", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              metavar="SECONDS", help="seconds between reconcile rounds over every ComputeDomain")
@click.option("--status-from-daemons", is_flag=True,
              help="status.nodes from what the IMEX daemons write (`driver compute-domain-daemon`): their "
                   "ComputeDomainCliques, or with ComputeDomainCliques=false their status.nodes entries; "
                   "default: from the daemon pods")
@click.option("--feature-gates", "feature_gates", default="", envvar="FEATURE_GATES", metavar="NAME=BOOL,...",
              help="NVIDIA's gates (ComputeDomainCliques: where the daemons write); the daemons get the same")
@click.option("--image-name", default=None, envvar="IMAGE_NAME", metavar="IMAGE",
              help="the image of the IMEX daemons' pods (NVIDIA's IMAGE_NAME: the controller's own)  "
                   "[default: ghcr.io/gpudra/gpudra:<version>]")
@click.option("--max-nodes-per-imex-domain", "max_nodes", type=click.IntRange(min=1), default=MAX_NODES_PER_IMEX_DOMAIN,
              show_default=True,
              envvar="MAX_NODES_PER_IMEX_DOMAIN", help="passed to the IMEX daemons (their clique's size limit)")
@click.option("-v", "--verbose", is_flag=True, help="log every object created, deleted or released")
def compute_domain_controller_cmd(kubeconfig: str | None, in_cluster: bool, interval_s: float,
                                  status_from_daemons: bool, feature_gates: str, image_name: str | None,
                                  max_nodes: int, verbose: bool) -> None:
    """Run the ComputeDomain controller against an API server (NVIDIA's CRD installed): per domain the IMEX
    daemons' DaemonSet and claim templates, status from the daemons, teardown on deletion. Runs until SIGTERM."""
    if not (kubeconfig or in_cluster):
        fail("give --kubeconfig or --in-cluster: the controller reconciles a cluster's ComputeDomains")

    from gpudra.computedomain.controller import DEFAULT_IMAGE, DaemonPod, StatusSource
    from gpudra.gpuplugin.featuregates import FeatureGateError, parse_feature_gates
    from gpudra.kubecluster.cdcontroller import run_controller

    try:
        gates = parse_feature_gates(feature_gates)
    except FeatureGateError as exc:
        fail(f"--feature-gates: {exc}")
    source = StatusSource(daemons_write=status_from_daemons, cliques_gate=gates.enabled("ComputeDomainCliques"))
    daemon = DaemonPod(image=image_name or DEFAULT_IMAGE, max_nodes=max_nodes,
                       feature_gates=tuple(sorted(gates.set.items())),
                       dns_names=gates.enabled("IMEXDaemonsWithDNSNames"))

    rest, stop = _cluster_process(kubeconfig, in_cluster, verbose)
    try:
        run_controller(rest, stop, interval_s, source, daemon)
    except KeyboardInterrupt:
        pass
    finally:
        rest.close()


@click.command("compute-domain-daemon")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), envvar="KUBECONFIG", help="the cluster to write to")
@click.option("--in-cluster", is_flag=True, help="use the pod's service account")
@click.option("--feature-gates", "feature_gates", default="", envvar="FEATURE_GATES", metavar="NAME=BOOL,...",
              help="NVIDIA's gates; ComputeDomainCliques picks where the daemon writes")
@click.option("--hosts-file", default=None, type=click.Path(dir_okay=False),
              help="keep the clique's IP -> compute-domain-daemon-NNNN lines here (NVIDIA writes /etc/hosts); "
                   "with IMEXDaemonsWithDNSNames only")
@click.option("--interval", "interval_s", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              metavar="SECONDS", help="seconds between rounds")
@click.option("-v", "--verbose", is_flag=True, help="log every write")
def compute_domain_daemon_cmd(kubeconfig: str | None, in_cluster: bool, feature_gates: str, hosts_file: str | None,
                              interval_s: float, verbose: bool) -> None:
    """The IMEX daemon's bookkeeping (NVIDIA's cmd/compute-domain-daemon, without the IMEX process): lists this
    node in its own ComputeDomain's status.nodes, or in its ComputeDomainClique, follows its pod's readiness,
    and takes itself off at SIGTERM. Who it is comes from NVIDIA's environment (COMPUTE_DOMAIN_UUID/NAME/
    NAMESPACE, CLIQUE_ID, NODE_NAME, POD_IP, POD_NAME, POD_UID, POD_NAMESPACE, MAX_NODES_PER_IMEX_DOMAIN)."""
    if not (kubeconfig or in_cluster):
        fail("give --kubeconfig or --in-cluster: the daemon writes to a cluster's API server")

    from gpudra.gpuplugin.featuregates import FeatureGateError, parse_feature_gates
    from gpudra.kubecluster.cddaemon import DaemonWriter, identity_from_env, run_daemon

    try:
        gates = parse_feature_gates(feature_gates)
        me = identity_from_env(os.environ)
    except FeatureGateError as exc:
        fail(f"--feature-gates: {exc}")
    except ValueError as exc:
        fail(str(exc))
    if hosts_file and not gates.enabled("IMEXDaemonsWithDNSNames"):
        fail("--hosts-file needs the IMEXDaemonsWithDNSNames feature gate")
    rest, stop = _cluster_process(kubeconfig, in_cluster, verbose)
    try:
        run_daemon(DaemonWriter(rest, me, cliques=gates.enabled("ComputeDomainCliques")), stop, interval_s,
                   hosts_path=hosts_file)
    except KeyboardInterrupt:
        pass
    finally:
        rest.close()
