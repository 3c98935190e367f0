"""IMEX daemons found by DNS-style names (NVIDIA's `IMEXDaemonsWithDNSNames` gate, on by default since 0.2).

The facts are those of kubernetes-sigs/dra-driver-nvidia-gpu (commit 95932046), cmd/compute-domain-daemon:

- dnsnames.go: a daemon's name is `compute-domain-daemon-%04d` of its index in its clique (constructDNSName; an index
  below 0 or not below maxNodesPerIMEXDomain is an error). WriteNodesConfig writes the IMEX nodes_config once, with
  all maxNodesPerIMEXDomain names whether or not a daemon holds them, so the file never changes; what changes is
  the hosts file: updateHostsFile keeps every line that does not mention `compute-domain-daemon-`, then adds
  `# Compute Domain Daemon mappings` and one `<ip>\t<name>` line per daemon of the clique (UpdateDNSNameMappings
  filters the daemons by clique ID). The IMEX daemon re-resolves the names on SIGUSR1.
- main.go writeDaemonsConfig (the gate off): the nodes_config lists the pod IPs of the clique's daemons, one a
  line, and changes whenever a daemon's IP does (the IMEX daemon is restarted).

Two differences, both for a file that is the same however often it is written: the mappings are sorted by name
(upstream ranges over a Go map, in random order), and an earlier `# Compute Domain Daemon mappings` line is not kept
(upstream keeps it and its trailing empty line, so each update adds both again: the TODO in updateHostsFile).
"""

from __future__ import annotations

from typing import Iterable, Mapping

from .daemonstatus import MAX_NODES_PER_IMEX_DOMAIN, DaemonInfo

DNS_NAME_PREFIX = "compute-domain-daemon-"
HOSTS_SEPARATOR = "# Compute Domain Daemon mappings"
HOSTS_FILE = "hosts"  # gpudra: the mappings beside nodes.cfg in the daemon's /imexd (upstream: the pod's /etc/hosts)


class DNSNameError(ValueError):
    pass


def dns_name(info: DaemonInfo, max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN) -> str:
    """constructDNSName."""
    if info.index < 0:
        raise DNSNameError(f"daemon {info.node_name} has invalid index {info.index}")
    if info.index >= max_nodes:
        raise DNSNameError(f"daemon {info.node_name} has invalid index {info.index}, must be less than {max_nodes}")
    return f"{DNS_NAME_PREFIX}{info.index:04d}"


def dns_mappings(daemons: Iterable[DaemonInfo], clique_id: str,
                 max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN) -> dict[str, str]:
    """UpdateDNSNameMappings: IP -> DNS name of the daemons of `clique_id` (those with an IP)."""
    return {d.ip_address: dns_name(d, max_nodes) for d in daemons if d.clique_id == clique_id and d.ip_address}


def static_nodes_config(max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN) -> str:
    """WriteNodesConfig: every possible daemon name, one a line."""
    return "".join(f"{DNS_NAME_PREFIX}{i:04d}\n" for i in range(max_nodes))


def ip_nodes_config(daemons: Iterable[DaemonInfo], clique_id: str) -> str:
    """writeDaemonsConfig (the gate off): the IPs of the clique's daemons, one a line, in status order."""
    return "".join(f"{d.ip_address}\n" for d in daemons if d.clique_id == clique_id and d.ip_address)


def hosts_file(existing: str, mappings: Mapping[str, str]) -> str:
    """updateHostsFile: `existing` without its daemon mappings, then the separator and the mappings."""
    kept = [line.strip() for line in existing.split("\n")]
    kept = [line for line in kept if DNS_NAME_PREFIX not in line and line != HOSTS_SEPARATOR]
    while kept and kept[-1] == "":
        kept.pop()
    body = "".join(f"{line}\n" for line in kept)
    return body + HOSTS_SEPARATOR + "\n" + "".join(
        f"{ip}\t{name}\n" for ip, name in sorted(mappings.items(), key=lambda item: (item[1], item[0])))
