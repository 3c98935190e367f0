"""`gpudra driver inject-event`, `prepare`, `status`: tools for a node's running driver (health events,
the kubelet's calls by hand, the checkpoint's view)."""
from __future__ import annotations

import json
import os
import sys

import click

from gpudra.cli.errors import warn
from gpudra.vocabulary import DRIVER_NAME
from gpudra.cli.output import output_option, render_data, render_table
from gpudra.cli.driver_options import (
    REGISTRAR_HELP, RUNNING_DRIVER_HELP, fail,
)


@click.command("inject-event")
@click.option("--root", default="/", show_default=True, help="the --root the driver runs with")
@click.option("--gpu", "gpu", default=None, help="GPU minor number or UUID (default: every GPU, for --gpu-lost)")
@click.option("--xid", type=click.IntRange(min=0), default=None, help="an XID critical error with this number")
@click.option("--ecc", is_flag=True, help="an uncorrectable (double-bit) ECC error")
@click.option("--gpu-lost", is_flag=True, help="the GPU fell off the bus")
@click.option("--clear", is_flag=True, help="the error cleared (with --xid N: that XID): removes the taints of "
                                            "errors that clear on their own (NVIDIA's XID catalog: IGNORE, RESTART_APP)")
@click.option("--reset", is_flag=True, help="the GPU was reset: removes every taint but those needing a reboot "
                                            "(XID 79, a lost or unmonitored GPU)")
@click.option("--gi", "gi_id", type=click.IntRange(min=0), default=None, help="GPU instance ID (one MIG device)")
@click.option("--ci", "ci_id", type=click.IntRange(min=0), default=None, help="compute instance ID (with --gi)")
def inject_event_cmd(root: str, gpu: str | None, xid: int | None, ecc: bool,
                     gpu_lost: bool, clear: bool, reset: bool, gi_id: int | None, ci_id: int | None) -> None:
    """Inject a GPU health event into a driver running with the simulated backend: it taints the device
    (or, with --clear/--reset, removes the taints that recovery removes) and republishes its ResourceSlices
    (a GPU it does not have is logged and ignored)."""
    from gpudra.discovery.health import HealthEvent, HealthEventError, spool_dir_for, write_spooled_event
    from gpudra.kubeletplugin.paths import DriverPaths

    if clear or reset:
        kinds = [k for k, on in (("recovered", clear), ("gpu-reset", reset), ("ecc", ecc), ("gpu-lost", gpu_lost))
                 if on]
        if len(kinds) != 1 or (reset and xid is not None):
            fail("give one of --clear [--xid N] or --reset (not with --ecc or --gpu-lost)")
    else:
        kinds = [k for k, on in (("xid", xid is not None), ("ecc", ecc), ("gpu-lost", gpu_lost)) if on]
        if len(kinds) != 1:
            fail("give exactly one of --xid N, --ecc, --gpu-lost, --clear, --reset")
    if gpu is None and kinds[0] != "gpu-lost":
        fail("--gpu is required for --clear and --reset" if clear or reset else "--gpu is required for --xid and --ecc")
    if ci_id is not None and gi_id is None:
        fail("--ci needs --gi")
    state = DriverPaths(root=root).simulated_state
    if not os.path.exists(state):  # most likely a mistyped --root: nothing would ever read the event
        fail(f"no simulated GPUs under {root} ({state} does not exist): give the --root of a driver started "
              f"with --backend simulated (a local cluster's node: DIR/nodes/NODE, DIR as `gpudra cluster up` "
              f"printed it); nothing was written")
    try:
        event = HealthEvent(kinds[0], gpu=gpu, gi_id=gi_id, ci_id=ci_id, xid=xid)
        path = write_spooled_event(spool_dir_for(state), event)
    except (HealthEventError, OSError) as exc:
        fail(str(exc))
    click.echo(json.dumps({"event": event.to_dict(), "spooled": path}))


def _claim_refs(claim_files: tuple[str, ...]) -> list[tuple[str, str, str]]:
    from gpudra.cli.inputs import read_documents

    refs = []
    # the one loader: files, directories, stdin, `List`s (what `gpudra allocate` prints), JSON and YAML
    for document in read_documents(claim_files):
        doc = document.obj
        if isinstance(doc, dict) and doc.get("kind") == "ResourceClaim":
            meta = doc.get("metadata") or {}
            refs.append((meta.get("namespace") or "default", meta.get("name", ""), meta.get("uid", "")))
    if not refs:
        fail("no ResourceClaim in the given files")
    missing = [f"{ns}/{name}" for ns, name, uid in refs if not uid]
    if missing:  # the driver would refuse each one ("uid: must not be empty"): say how to give them one
        import uuid

        fail(f"ResourceClaim {', '.join(missing)} has no metadata.uid: the kubelet names a claim by the UID the "
              f"API server gave it, and the driver prepares it only when its copy (--claims DIR) has the same UID. "
              f"A claim printed by `gpudra allocate` has none: add one under metadata in both, e.g. "
              f"`uid: {uuid.uuid4()}` (any RFC 4122 UUID, as `uuidgen` prints)")
    return refs


def _kubelet(root: str, driver_name: str, registry_dir: str):
    import grpc

    from gpudra.kubeletplugin.kubelet_client import KubeletClient
    from gpudra.kubeletplugin.paths import DriverPaths

    paths = DriverPaths(driver_name=driver_name, root=root, registry_dir=registry_dir)
    sockets = paths.registration_sockets()  # rolling updates: one per driver pod; the kubelet takes the newest
    client = KubeletClient(sockets[0] if sockets else paths.registration_socket)
    try:
        client.register()
    except (grpc.RpcError, RuntimeError) as exc:
        fail(f"cannot register with the plugin at {client.registration_socket}: "
              f"{exc.details() if isinstance(exc, grpc.RpcError) else exc}")
    return client, paths


@click.command("prepare")
@click.argument("claim_files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--root", default="/", show_default=True, help="the --root the driver runs with")
@click.option("--driver-name", default=DRIVER_NAME, show_default=True, help=RUNNING_DRIVER_HELP)
@click.option("--kubelet-registrar-directory-path", "registry_dir", default="/var/lib/kubelet/plugins_registry",
              show_default=True, help=REGISTRAR_HELP)
@click.option("--unprepare", is_flag=True, help="call NodeUnprepareResources instead")
@click.option("--show-container", is_flag=True, help="also print the OCI spec a container would get")
@output_option(pipe_default="yaml", help="table: one row per claim (wide: with its CDI device IDs); yaml/json: the "
                                         "kubelet's answer per claim as data.")
def prepare_cmd(claim_files: tuple[str, ...], root: str, driver_name: str, registry_dir: str, unprepare: bool,
                show_container: bool, output: str) -> None:
    """Act as the kubelet: register with a running driver and (un)prepare the claims in CLAIM_FILES."""
    refs = _claim_refs(claim_files)
    client, paths = _kubelet(root, driver_name, registry_dir)
    try:
        reply = client.unprepare(refs) if unprepare else client.prepare(refs)
    finally:
        client.close()
    failed = False
    out = []
    for ns, name, uid in refs:
        answer = reply.claims[uid]
        entry: dict = {"claim": f"{ns}/{name}", "uid": uid}
        if answer.error:
            entry["error"] = answer.error
            failed = True
        elif not unprepare:
            entry["devices"] = [{"requestNames": list(d.request_names), "pool": d.pool_name, "device": d.device_name,
                                 "cdiDeviceIDs": list(d.cdi_device_ids)} for d in answer.devices]
            if show_container:
                from gpudra.cdi import CdiError, apply_devices, default_oci_spec

                ids = [i for d in answer.devices for i in d.cdi_device_ids]
                try:
                    oci = apply_devices(default_oci_spec(), ids, paths.cdi_spec_dirs)
                    entry["container"] = {"env": oci["process"]["env"],
                                          "devices": [d["path"] for d in oci["linux"].get("devices", [])],
                                          "mounts": [m["destination"] for m in oci.get("mounts", [])]}
                except CdiError as exc:
                    entry["container"] = {"error": str(exc)}
        out.append(entry)
    if output in ("yaml", "json"):
        click.echo(render_data(out, output), nl=False)
    else:
        _prepare_table(out, output == "wide", show_container, "Unprepared" if unprepare else "Prepared")
    if failed:
        sys.exit(1)


def _prepare_table(entries: list[dict], wide: bool, show_container: bool, done: str) -> None:
    """CLAIM, UID, DEVICES (wide: CDI-DEVICE-IDS; --show-container: CONTAINER-DEVICES), then STATUS last: `Prepared`
    or the driver's error, which can be long and wraps."""
    rows = []
    for entry in entries:
        devices = entry.get("devices") or []
        row = [entry["claim"], entry["uid"], ",".join(d["device"] for d in devices) or "-"]
        if wide:
            row.append(",".join(i for d in devices for i in d["cdiDeviceIDs"]) or "-")
        if show_container:
            container = entry.get("container") or {}
            row.append(",".join(container.get("devices") or []) or container.get("error", "-"))
        rows.append([*row, f"error: {entry['error']}" if "error" in entry else done])
    headers = ["CLAIM", "UID", "DEVICES", *(["CDI-DEVICE-IDS"] if wide else []),
               *(["CONTAINER-DEVICES"] if show_container else []), "STATUS"]
    click.echo(render_table(headers, rows), nl=False)


@click.command("status")
@click.option("--root", default="/", show_default=True, help="the --root the driver runs with")
@click.option("--driver-name", default=DRIVER_NAME, show_default=True, help=RUNNING_DRIVER_HELP)
@click.option("--kubelet-plugins-directory-path", "plugins_dir", default="/var/lib/kubelet/plugins",
              show_default=True, help="the driver's --kubelet-plugins-directory-path, where its checkpoint is (a "
                                      "local cluster's nodes: /plugins)")
@output_option(pipe_default="yaml", help="table: one row per prepared claim (wide: with its CDI device IDs and "
                                         "spec file); yaml/json: the checkpoint's report.")
def status_cmd(root: str, driver_name: str, plugins_dir: str, output: str) -> None:
    """Show the prepared claims recorded in the driver's checkpoint and their CDI specs. A --root where no driver
    ever ran (no plugin directory) is an error, exit 2."""
    from gpudra.computedomain import records as _  # noqa: F401 - registers the plugins' records (and the GPU's)
    from gpudra.kubeletplugin.checkpoint import CheckpointError, read_checkpoint
    from gpudra.kubeletplugin.claimpaths import ClaimPathError, cdi_spec_path
    from gpudra.kubeletplugin.paths import DriverPaths
    from gpudra.kubeletplugin.quarantine import load_quarantine

    paths = DriverPaths(driver_name=driver_name, root=root, plugins_dir=plugins_dir)
    if not os.path.isdir(paths.plugin_dir):  # a mistyped --root: "no prepared claims" would be a wrong answer
        fail(f"no {driver_name} driver under {root} ({paths.plugin_dir} does not exist): give the --root (and "
              f"--kubelet-plugins-directory-path) the driver runs with; a local cluster's node: --root "
              f"DIR/nodes/NODE --kubelet-plugins-directory-path /plugins")
    try:
        data = read_checkpoint(paths.checkpoint)
        quarantined = load_quarantine(paths.quarantine)
    except CheckpointError as exc:
        fail(str(exc))
    claims = []
    # the driver quarantines unusable entries at its next start
    invalid = sorted(({"uid": bad.uid, "reason": bad.reason} for bad in data.unusable), key=lambda i: i["uid"]) \
        if data is not None else []
    for uid, entry in sorted((data.claims if data is not None else {}).items()):
        try:
            spec: str | None = cdi_spec_path(paths.cdi_spec_dir, driver_name, uid)
        except ClaimPathError:  # not a UID the driver would write a file for
            spec = None
        claims.append({"uid": uid, "claim": f"{entry.namespace}/{entry.name}", "state": entry.state,
                       "devices": [d.device for d in entry.devices],
                       "cdiDeviceIDs": [i for d in entry.devices for i in d.cdi_device_ids],
                       "cdiSpec": spec if spec and os.path.exists(spec) else None})
    result: dict = {"checkpoint": paths.checkpoint, "exists": data is not None, "claims": claims}
    if invalid:
        result["invalid"] = invalid
    if quarantined:
        result["quarantine"] = paths.quarantine
        result["quarantined"] = [{"uid": q.uid, "reason": q.reason,
                                  "reservedDevices": [r.device or f"gpu minor {r.gpu_minor}" for r in q.reserved]}
                                 for q in quarantined]
    if output in ("yaml", "json"):
        click.echo(render_data(result, output), nl=False)
    else:
        _status_table(result, output == "wide")


def _status_table(result: dict, wide: bool) -> None:
    """The report's rows: prepared claims, then entries the driver cannot use (Invalid: quarantined at its next
    start; Quarantined: set aside, their devices still reserved), whose reasons are warnings on stderr."""
    rows = []
    for claim in result["claims"]:
        row = [claim["claim"], claim["uid"], claim["state"], ",".join(claim["devices"]) or "-"]
        rows.append([*row, ",".join(claim["cdiDeviceIDs"]) or "-", claim["cdiSpec"] or "-"] if wide else row)
    for state, entries in (("Invalid", result.get("invalid", [])), ("Quarantined", result.get("quarantined", []))):
        for entry in entries:
            warn(f"checkpoint entry {entry['uid']}: {entry['reason']}"
                 + (" (quarantined: its devices stay reserved)" if state == "Quarantined" else ""))
            row = ["-", str(entry["uid"]), state, ",".join(entry.get("reservedDevices") or []) or "-"]
            rows.append([*row, "-", "-"] if wide else row)
    if not rows:
        where = result["checkpoint"] if result["exists"] else f"{result['checkpoint']} (it does not exist)"
        click.echo(f"no prepared claims in {where}", err=True)
        return
    headers = ["CLAIM", "UID", "STATE", "DEVICES", *(["CDI-DEVICE-IDS", "CDI-SPEC"] if wide else [])]
    click.echo(render_table(headers, rows), nl=False)
