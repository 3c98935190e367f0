"""`gpudra simulate --workload nvl72`: multi-node gang jobs on GB200 NVL72 racks, clique-aware vs clique-blind."""

from __future__ import annotations

from typing import Any

import click

from gpudra.cli.errors import UsageError


def run_nvl72(*, racks: int, gangs_csv: str | None, policies: list[str], seed: int, seeds: int, method: str,
              tune: float, patience: int, out_dir: str | None, output: str, via_scheduler: bool | None = None) -> None:
    """Every (policy, seed) experiment on one gang trace; printed and written like the trace experiments.
    `via_scheduler`: True every policy through gpudra's scheduler, False through the replay's rules, None each
    policy through the scheduler where it has it."""
    from gpudra.simulate.gangreplay import GangSimulationError, run_gangs
    from gpudra.simulate.gangs import GANG_POLICIES, REPLAY_POLICIES, SCHEDULER_POLICIES
    from gpudra.simulate.nvl72 import load_gangs, nvl72_racks, synthetic_gangs
    from gpudra.simulate.trace import TraceError

    default = ["clique-aware", "clique-blind"]
    chosen = list(GANG_POLICIES) if "all" in policies else policies or default
    unknown = [p for p in chosen if p not in GANG_POLICIES]
    if unknown:
        raise UsageError(f"unknown policy {unknown[0]!r} for --workload nvl72; choose from "
                         f"{', '.join(GANG_POLICIES)} or all")
    try:
        topology = nvl72_racks(racks)
        fixed = load_gangs(gangs_csv) if gangs_csv else None
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    if via_scheduler and any(p not in SCHEDULER_POLICIES for p in chosen):
        raise UsageError(f"--gang-placement scheduler places only {', '.join(SCHEDULER_POLICIES)} gangs")
    if via_scheduler is False and any(p not in REPLAY_POLICIES for p in chosen):
        raise UsageError(f"--gang-placement replay places only {', '.join(REPLAY_POLICIES)} gangs (gpudra's "
                         f"scheduler places the others)")
    results = []
    generated = {}
    try:
        for s in range(seed, seed + seeds):
            # the synthetic trace is drawn from the seed too: each seed is another sample of the same distribution
            trace = fixed or synthetic_gangs(topology, s)
            if fixed is None:
                generated[f"gangs-seed{s}"] = trace
            for policy in chosen:
                results.append(run_gangs(topology, trace, policy, s, method, tune, patience, via_scheduler))
    except GangSimulationError as exc:
        raise UsageError(str(exc)) from None
    if out_dir:
        from gpudra.simulate.gangreport import write_gang_outputs

        try:
            written = write_gang_outputs(results, out_dir, generated)
        except OSError as exc:
            raise UsageError(f"--out-dir {out_dir}: {exc.strerror or exc}") from None
        for path in written:
            click.echo(f"wrote {path}", err=True)
    _print(results, output)


def _print(results: list[dict[str, Any]], output: str) -> None:
    from gpudra.cli.output import echo_experiments
    from gpudra.simulate.gangreport import gang_summary_csv, summarize_gangs

    echo_experiments(results, output, summarize_gangs, gang_summary_csv, _table)


def _table(rows: list[dict[str, Any]], wide: bool) -> str:
    columns = [("TOPOLOGY", "topology"), ("METHOD", "method"), ("POLICY", "policy"), ("SEEDS", "seeds"),
               ("GPUS", "gpus"), ("JOBS", "jobs"), ("STARTED", "started"), ("NVLINK", "started_nvlink"),
               ("DEGRADED", "degraded"), ("NOT-STARTED", "not_started"), ("ALLOC%", "allocation_ratio"),
               ("SERVED%", "served_ratio"), ("STD", "served_ratio_std"), ("FRAG-GPUS", "fragmented_gpus")]
    if wide:
        columns[1:1] = [("TRACE", "trace")]
        columns += [("STRANDED-FOR-WAITING", "stranded_for_waiting_gpus"), ("NEVER-FITS", "never_fits"),
                    ("WAIT-S", "mean_wait_s"), ("CPU-SECONDS", "cpu_seconds")]
    cells = [[h for h, _ in columns]] + [["-" if row.get(k) is None else str(row.get(k)) for _, k in columns]
                                         for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)
