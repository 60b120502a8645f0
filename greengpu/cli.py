"""The `greengpu` command line.

Every command turns bad input into one line on stderr and exit code 2 (docs/INPUTS.md):
`BadInput` from our own validation and click's usage errors alike.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from greengpu import __version__
from greengpu.errors import BadInput

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
ENV_PREFIX = "GREENGPU"
_VERBOSITY = "greengpu.verbosity"
"""Key in click's shared context meta: -1 quiet, 0 normal, 1 and more verbose."""
EXTRA_OF_MODULE = {"pandas": "plan", "numpy": "plan", "statsmodels": "plan", "scipy": "plan", "matplotlib": "plan",
                   "jinja2": "plan", "kubernetes": "kube", "grpc": "kube"}
"""The install extra (pyproject.toml) that brings each optional library: the slim core has none of them."""


class _HelpFirstGroup(click.Group):
    """A group whose subcommands answer --help before the group's own setup runs.

    Click runs a group's callback before it parses the subcommand's arguments; the `slurm` and `kube`
    groups load the cluster inventory there, so `greengpu slurm verify --help` failed on a machine
    without /etc/greengpu/cluster.yaml. Help needs no configuration file.
    """

    group_class = type  # subgroups (slurm, kube) are of this class too

    def invoke(self, ctx: click.Context) -> Any:
        protected = getattr(ctx, "_protected_args", None)
        args = [*(protected if protected is not None else ctx.protected_args), *ctx.args]
        rest = args[1:]
        if "--" in rest:
            rest = rest[: rest.index("--")]
        if args and any(arg in ctx.help_option_names for arg in rest):
            name, command, sub_args = self.resolve_command(ctx, args)
            if command is not None:
                with ctx:
                    command.make_context(name, sub_args, parent=ctx)  # prints the help and exits
        return super().invoke(ctx)


def verbosity() -> int:
    """-1 with -q, 0 by default, the number of -v otherwise."""
    ctx = click.get_current_context(silent=True)
    return int(ctx.meta.get(_VERBOSITY, 0)) if ctx is not None else 0


def note(message: str) -> None:
    """A remark for the person at the terminal, on stderr (never mixed into --json stdout); -q silences it."""
    if verbosity() >= 0:
        click.echo(f"greengpu: {message}", err=True)


@click.group(cls=_HelpFirstGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="greengpu")
@click.option("-v", "--verbose", count=True, help="More log detail on stderr (-v info, -vv debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr: no notes, no progress display.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool) -> None:
    """greengpu cuts the energy, cost and CO2 of shared GPU clusters without hurting the jobs that matter.

    Exit codes: 0 success, 1 runtime failure, 2 bad input or usage. Every option can also be set
    from the environment: each option's help names its variable, GREENGPU_<COMMAND>_<OPTION>
    (e.g. GREENGPU_CHECK_CLUSTER, GREENGPU_SLURM_STATUS_JSON); a flag on the command line wins.
    """
    ctx.meta[_VERBOSITY] = -1 if quiet else verbose
    # Set every time (NOTSET: as the command's own logging says), so one invocation never leaks into the next.
    level = logging.ERROR if quiet else logging.NOTSET if not verbose else logging.INFO if verbose == 1 \
        else logging.DEBUG
    logging.getLogger("greengpu").setLevel(level)
    if verbose and not logging.getLogger().handlers:
        logging.basicConfig(level=level, format="greengpu: %(message)s", stream=sys.stderr)


@cli.command()
@click.option("--cluster", "cluster_file", required=True, metavar="FILE",
              help="Cluster inventory YAML (docs/INVENTORY.md).")
@click.option("--policy", "policy_name", default=None, metavar="P",
              help="Built-in policy name (always-on, idle-timeout, default) or a policy YAML file.")
@click.option("--slurm-conf", "slurm_conf", default=None, metavar="FILE",
              help="slurm.conf: refuse a policy whose wake-up retries cannot finish inside its ResumeTimeout.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
def check(cluster_file: str, policy_name: str | None, slurm_conf: str | None, as_json: bool) -> None:
    """Validate a cluster inventory and optionally a policy, then summarise them.

    Prints nodes and GPUs per model, idle and peak power, tenants and quotas, and warns when
    quotas promise more GPUs than are installed. Any error is one line naming file, line and key.
    """
    from greengpu.config.inventory import load_cluster
    from greengpu.config.policy import load_policy
    from greengpu.report.check import policy_lines, summarize

    cluster = load_cluster(cluster_file)
    policy = load_policy(policy_name) if policy_name else None
    if policy is not None:
        from greengpu.report.check import wake_timing_problem

        problem = wake_timing_problem(cluster, policy, _resume_timeout_s(slurm_conf) if slurm_conf else None)
        if problem:
            raise BadInput(problem)
    summary = summarize(cluster)
    if as_json:
        payload: dict[str, Any] = asdict(summary)
        payload["policy"] = policy.name if policy else None
        click.echo(json.dumps(payload, indent=2, sort_keys=True))
        return
    _print_check(cluster_file, summary, policy_lines(policy) if policy else [])


def _resume_timeout_s(slurm_conf: str) -> float:
    from greengpu.backends.slurm import resume_timeout_s

    try:
        text = Path(slurm_conf).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise BadInput(f"{slurm_conf}: cannot read: {error}") from None
    try:
        return resume_timeout_s(text)
    except ValueError as error:
        raise BadInput(f"{slurm_conf}: {error}") from None


def _print_check(cluster_file: str, summary: Any, policy_text: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{cluster_file}[/bold]: OK, {summary.nodes} nodes, {summary.gpus} GPUs")
    models = Table(title="Nodes and GPUs by model")
    for column in ("GPU model", "nodes", "GPUs", "idle kW", "peak kW", "asleep kW"):
        models.add_column(column, justify="right" if column != "GPU model" else "left")
    for m in summary.models:
        models.add_row(m.gpu_model, str(m.nodes), str(m.gpus), f"{m.idle_w / 1000:.2f}", f"{m.peak_w / 1000:.2f}",
                       f"{m.sleep_w / 1000:.2f}")
    models.add_row("total (IT)", str(summary.nodes), str(summary.gpus), f"{summary.idle_kw:.2f}",
                   f"{summary.peak_kw:.2f}", "")
    models.add_row("facility (x PUE)", "", "", f"{summary.facility_idle_kw:.2f}", f"{summary.facility_peak_kw:.2f}", "")
    console.print(models)
    if summary.tenants:
        tenants = Table(title="Tenants")
        for column in ("tenant", "quota GPUs", "share", "weight", "borrow limit"):
            tenants.add_column(column, justify="left" if column == "tenant" else "right")
        for t in summary.tenants:
            borrow = "any idle" if t["borrow_limit_gpus"] is None else f"{t['borrow_limit_gpus']:g}"
            tenants.add_row(t["tenant"], f"{t['quota_gpus']:g}", f"{t['quota_share']:.0%}", f"{t['weight']:g}", borrow)
        tenants.add_row("total", f"{summary.quota_total_gpus:g}", "", "", "")
        console.print(tenants)
    for pool in summary.pools:
        kind = "spot" if pool["spot"] else "on-demand"
        console.print(f"pool {pool['pool']}: up to {pool['max_nodes']} x {pool['type']} ({kind}) "
                      f"at {pool['price_per_hour']:g}/node-hour")
    for line in policy_text:
        console.print(line, highlight=False)
    for warning in summary.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")


@cli.command()
@click.option("--ledger", "ledger_file", required=True, metavar="FILE.db", help="SQLite ledger written by "
              "greengpu simulate --ledger or greengpu daemon.")
@click.option("--month", required=True, metavar="YYYY-MM", help="UTC calendar month to report; `last`: the month "
              "before this one (for a scheduled report).")
@click.option("--run", "run_id", type=int, default=None, metavar="N",
              help="Which run of the ledger (needed when it holds several, e.g. one per simulated policy).")
@click.option("--format", "output_format", type=click.Choice(["text", "json", "csv", "html"]), default="text",
              show_default=True, help="html: one self-contained page with charts (needs the plan extra).")
@click.option("--json", "as_json", is_flag=True, help="The same as --format json.")
@click.option("--out", "out_file", default=None, metavar="FILE", help="Write the report here instead of stdout "
              "({month} in the name becomes the month reported).")
@click.option("--aggregate", type=click.Choice(["tenant", "node", "class", "job"]), default="tenant",
              show_default=True, help="What a row of the bill is.")
@click.option("--share-idle", type=click.Choice(["none", "proportional", "even"]), default="none", show_default=True,
              help="Idle energy and its cost: its own row, or shared by allocated GPU-hours, or in equal parts.")
@click.option("--baseline", "baseline_run", type=int, default=None, metavar="RUN",
              help="Show the saving against this run of the ledger (e.g. the always-on run of the same replay).")
@click.option("--settings", "settings_file", default=None, metavar="FILE",
              help="Tariff, carbon (location- and market-based), PUE and embodied emissions (docs/REPORT.md).")
def report(ledger_file: str, month: str, run_id: int | None, output_format: str, as_json: bool,
           out_file: str | None, aggregate: str, share_idle: str, baseline_run: int | None,
           settings_file: str | None) -> None:
    """Monthly GPU-hours, energy, cost and CO2 by tenant, node, job class or job, plus idle, from a ledger.

    Rows plus idle add up to the totals to a cent and a gram under every idle-sharing rule. The ledger
    is opened read-only: a report never writes to its input, and a file that is not a greengpu ledger
    is refused. docs/REPORT.md gives the settings, the JSON keys and the CSV columns.
    """
    from greengpu.report.monthly_main import report_main

    if as_json:
        if output_format not in ("text", "json"):
            raise click.UsageError(f"--json and --format {output_format} contradict each other")
        output_format = "json"
    report_main(ledger_file, month, run_id, output_format, out_file, aggregate, share_idle, baseline_run,
                settings_file)


def _ledger_path(name: str) -> Path:
    """A ledger path that can be written, checked before any replay starts."""
    from greengpu.accounting.ledger import runs

    path = Path(name)
    if path.is_dir() or not path.parent.is_dir():
        raise BadInput(f"--ledger: cannot write a ledger at {name}")
    if path.exists():
        runs(path)  # an existing file must be a ledger of this schema: fail now, not after the replay
    return path


@cli.command()
@click.option("--trace", "trace_file", required=True, metavar="FILE", help="Job trace (docs/TRACES.md).")
@click.option("--trace-format", type=click.Choice(["csv", "philly", "sacct"]), default="csv", show_default=True,
              help="csv: canonical columns; philly: the public Philly CSV; sacct: sacct --parsable2 output.")
@click.option("--cluster", "cluster_file", required=True, metavar="FILE", help="Cluster inventory YAML.")
@click.option("--policy", "policies", multiple=True, required=True, metavar="P",
              help="Built-in policy name or policy file; repeat to compare policies side by side.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout (keys in docs/SIMULATOR.md).")
@click.option("--until", "until_s", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Stop the virtual clock this many seconds after the first submit.")
@click.option("--skip-bad-rows", is_flag=True, help="Skip malformed trace rows and jobs that can never start on the "
              "cluster (counted) instead of stopping.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for randomised events (spot interruptions); the same inputs and seed give the same results.")
@click.option("--ledger", "ledger_file", default=None, metavar="FILE.db",
              help="Also record energy, cost and CO2 per job, tenant and node in this SQLite ledger (one run per "
                   "policy; read it with greengpu report).")
def simulate(trace_file: str, trace_format: str, cluster_file: str, policies: tuple[str, ...], as_json: bool,
             until_s: float | None, skip_bad_rows: bool, seed: int, ledger_file: str | None) -> None:
    """Replay a job trace under one or more policies and compare energy, cost, CO2, waits and safety.

    The replay runs the same scheduling core as the daemon on a virtual clock. Figures are facility
    energy (GPUs + hosts, x PUE), cost, CO2, waits per class, preemptions, node sleep and wakes, and
    invariant_violations, which must be 0.
    """
    from greengpu.config.inventory import load_cluster
    from greengpu.config.policy import load_policy
    from greengpu.sim.engine import Simulation
    from greengpu.sim.feasibility import split_never_fitting
    from greengpu.sim.traces import REPLAY_SPAN_S, read_trace

    cluster = load_cluster(cluster_file)
    loaded = [load_policy(p) for p in policies]
    trace = read_trace(trace_file, trace_format, skip_bad_rows=skip_bad_rows, max_span_s=REPLAY_SPAN_S)
    if trace.skipped:
        note(f"skipped {trace.skipped} bad row(s); first: {trace.first_error}")
    jobs, never = split_never_fitting(trace.jobs, cluster)
    if never and not skip_bad_rows:
        more = f" (and {len(never) - 1} more such jobs)" if len(never) > 1 else ""
        raise BadInput(f"{trace_file}: {never[0]} ({cluster_file}){more}; --skip-bad-rows leaves such jobs out")
    if never:
        note(f"left out {len(never)} job(s) that can never start on {cluster_file}; first: {never[0]}")
    if not jobs:
        raise BadInput(f"{trace_file}: no GPU jobs in the trace")
    results = []
    ledger_path = _ledger_path(ledger_file) if ledger_file is not None else None
    written: list[str] = []
    for policy in loaded:
        with _progress(f"simulating {policy.name}", len(jobs)) as report:
            simulation = Simulation(cluster, policy, jobs, until_s=until_s, progress=report,
                                    attribute=ledger_path is not None)
            result = simulation.run().values
        if result["unplaceable_jobs"]:
            note(f"{policy.name}: {len(result['unplaceable_jobs'])} job(s) never started, no placement exists "
                 f"for them on this cluster (first: {result['unplaceable_jobs'][0]})")
        if ledger_path is not None and simulation.attribution is not None:
            from greengpu.accounting.ledger import write_run

            result["ledger_run_id"] = write_run(ledger_path, simulation.attribution, kind="simulate",
                                                policy=policy.name, source=str(trace_file))
            written.append(f"{result['ledger_run_id']} ({policy.name})")
        result["skipped_rows"] = trace.skipped + len(never)
        result["seed"] = seed
        results.append(result)
    if ledger_path is not None:
        note(f"wrote run{'s' if len(written) > 1 else ''} {', '.join(written)} to {ledger_path}; read one with "
             f"greengpu report --ledger {ledger_path} --run N --month YYYY-MM")
    if as_json:
        click.echo(json.dumps({"results": results}, sort_keys=False))
        return
    _print_simulation(results)


class _progress:
    """A rich progress bar on stderr when it is a terminal; silent otherwise."""

    def __init__(self, label: str, total: int) -> None:
        self.label = label
        self.total = total
        self.bar: Any = None

    def __enter__(self) -> Any:
        if not sys.stderr.isatty() or verbosity() < 0:
            return None
        from rich.console import Console
        from rich.progress import Progress

        self.bar = Progress(console=Console(stderr=True), transient=True)
        self.bar.start()
        task = self.bar.add_task(self.label, total=self.total)

        def report(done: int, total: int) -> None:
            self.bar.update(task, completed=done)

        return report

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


class _phases:
    """A spinner with the current phase and the time spent on stderr when it is a terminal (never with -q,
    never on stdout, so --json output stays clean); yields a callback taking the phase's name."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: Any = None

    def __enter__(self) -> Any:
        if not sys.stderr.isatty() or verbosity() < 0:
            return None
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=True)
        self.bar.start()
        task = self.bar.add_task(self.label, total=None)

        def phase(name: str) -> None:
            self.bar.update(task, description=f"{self.label}: {name}")

        return phase

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _print_simulation(results: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Simulated policies")
    table.add_column("figure")
    for result in results:
        table.add_column(str(result["policy"]), justify="right")
    currency = results[0].get("currency", "")

    def fmt(value: Any, digits: int = 1) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:,.{digits}f}"
        return f"{value:,}"

    rows: list[tuple[str, Any]] = [
        ("jobs completed", lambda r: f"{r['jobs_completed']:,} / {r['jobs']:,}"),
        ("facility energy (kWh)", lambda r: fmt(r["energy_kwh"])),
        ("GPU energy (kWh)", lambda r: fmt(r["gpu_energy_kwh"])),
        (f"cost ({currency})", lambda r: fmt(r["cost"], 2)),
        ("CO2 (kg)", lambda r: fmt(r["co2_kg"])),
        ("wait p50 / p95 (s)", lambda r: f"{fmt(r['wait_s']['p50'], 0)} / {fmt(r['wait_s']['p95'], 0)}"),
        ("wait mean (s)", lambda r: fmt(r["wait_s"]["mean"])),
        ("GPU utilisation", lambda r: f"{r['gpu_hours_allocated'] / r['gpu_hours_capacity']:.1%}"
         if r["gpu_hours_capacity"] else "-"),
        ("preemptions", lambda r: fmt(r["preemptions"])),
        ("lost GPU-hours", lambda r: fmt(r["lost_gpu_hours"])),
        ("node sleep hours", lambda r: fmt(r["node_sleep_hours"])),
        ("wakes", lambda r: fmt(r["wakes"])),
        ("SLA violations", lambda r: fmt(r["sla_violations"])),
        ("invariant violations", lambda r: fmt(r["invariant_violations"])),
        ("simulation wall time (s)", lambda r: fmt(r["sim_wall_s"])),
    ]
    for label, render in rows:
        table.add_row(label, *[render(r) for r in results])
    Console().print(table)
    base = results[0]
    for other in results[1:]:
        if base["energy_kwh"]:
            saved = 1 - other["energy_kwh"] / base["energy_kwh"]
            Console().print(f"{other['policy']} vs {base['policy']}: {saved:.1%} less facility energy")


@cli.command()
@click.option("--policy", "policy_name", default="default", show_default=True, metavar="P",
              help="Built-in policy name or policy YAML; its `capping` section is applied.")
@click.option("--backend", type=click.Choice(["real", "fake"]), default="real", show_default=True,
              help="real: NVML on this node's GPUs; fake: simulated GPUs (no GPU needed).")
@click.option("--classes", "classes_file", default=None, metavar="FILE",
              help="Class file: default_class, gpus {INDEX: CLASS}, partition_classes {PARTITION: CLASS}.")
@click.option("--class-source", type=click.Choice(["local", "slurm", "kubernetes"]), default="local",
              show_default=True, help="Where the job on each GPU comes from: the class file's GPU map, Slurm "
              "(scontrol), or the pod's greengpu.io/class annotation.")
@click.option("--node", default=None, metavar="NAME",
              help="This node's Slurm or Kubernetes name (default: the short hostname).")
@click.option("--kube-host", default=None, metavar="URL",
              help="Kubernetes API server URL without auth (default: in-cluster config, else kubeconfig).")
@click.option("--pod-resources-socket", default="/var/lib/kubelet/pod-resources/kubelet.sock", show_default=True,
              metavar="SOCKET", help="With --class-source kubernetes: the kubelet's PodResources API (GPU -> pod by "
              "UUID); when absent, the GPU processes' cgroups are read (needs hostPID).")
@click.option("--journal", default="/var/lib/greengpu/agent-journal.jsonl", show_default=True, metavar="FILE",
              help="JSON-lines record of every limit set; read at start-up to undo a crashed session.")
@click.option("--listen", default="127.0.0.1:9474", show_default=True, metavar="HOST:PORT",
              help="Where /metrics and /healthz are served (port 0: any free port). The shipped unit gives the "
              "node's address, so a central Prometheus can scrape it.")
@click.option("--stale-after-s", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="A last good tick older than this fails /healthz (503) and puts the GPUs back to default "
              "limits until ticks work again (default: 3 intervals, at least 30 s).")
@click.option("--interval-s", type=click.FloatRange(min=0.05), default=10.0, show_default=True,
              help="Seconds between control ticks.")
@click.option("--nonbinding-after-s", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="A busy GPU whose cap has not bound for this long moves to locked clocks (when allowed).")
@click.option("--once", is_flag=True, help="One tick, then restore the GPUs and exit (a test of the whole path).")
@click.option("--dry-run", is_flag=True, help="Decide and log; change nothing.")
@click.option("--fake-gpus", default="4xA100", show_default=True, metavar="SPEC",
              help="With --backend fake: GPUs such as 4xA100 or 2xH200,1xP100.")
@click.option("--fake-state", default=None, metavar="FILE",
              help="With --backend fake: keep the fake GPUs' settings in FILE, so they outlive the process.")
@click.option("--fake-busy", default="", metavar="INDEXES", help="With --backend fake: GPUs with work, e.g. 0,1.")
@click.option("--fake-not-root", is_flag=True, help="With --backend fake: refuse writes as NVML does without root.")
def agent(policy_name: str, backend: str, classes_file: str | None, class_source: str, node: str | None,
          kube_host: str | None, pod_resources_socket: str, journal: str, listen: str,
          stale_after_s: float | None, interval_s: float,
          nonbinding_after_s: float, once: bool, dry_run: bool, fake_gpus: str, fake_state: str | None,
          fake_busy: str, fake_not_root: bool) -> None:
    """Run on a GPU node: cap each GPU for the job class running on it, restore everything on exit.

    Reads power, energy, limits and clocks through NVML, applies the policy's capping decision per
    job class, journals every change, restores the GPUs on SIGTERM/SIGINT and after a crash, and
    serves Prometheus metrics (docs/AGENT.md).
    """
    import logging

    from greengpu.config.policy import load_policy
    from greengpu.control.agent_main import AgentOptions, parse_gpu_indexes, run_agent

    busy = parse_gpu_indexes(fake_busy)
    logging.basicConfig(level=logging.INFO, format="greengpu agent: %(message)s", stream=sys.stderr, force=True)
    code = run_agent(AgentOptions(
        policy=load_policy(policy_name), backend=backend, fake_gpus=fake_gpus, fake_state=fake_state,
        fake_busy=busy, fake_not_root=fake_not_root, classes_file=classes_file, class_source=class_source,
        node=node, kube_host=kube_host, journal=journal, listen=listen, interval_s=interval_s, once=once,
        dry_run=dry_run, nonbinding_after_s=nonbinding_after_s, stale_after_s=stale_after_s,
        pod_resources_socket=pod_resources_socket))
    if code:
        raise click.exceptions.Exit(code)


@cli.command()
@click.option("--history", "history_file", default=None, metavar="FILE",
              help="Usage history CSV: time, gpus_busy [, gpus_pending] [, tenant] [, gpu_model] "
              "(docs/FORECAST.md).")
@click.option("--trace", "trace_file", default=None, metavar="FILE", help="Derive the history from a job trace.")
@click.option("--trace-format", type=click.Choice(["csv", "philly", "sacct"]), default="csv", show_default=True)
@click.option("--cluster", "cluster_file", default=None, metavar="FILE", help="Inventory: the installed GPUs.")
@click.option("--horizon", default=None, metavar="DURATION", help="How far to plan, e.g. 90d (default 90d).")
@click.option("--lead-time", default=None, metavar="DURATION", help="Order-to-ready time, e.g. 12w (default 12w).")
@click.option("--target-utilisation", type=click.FloatRange(0.05, 1.0), default=None,
              help="0.80 development, 0.65 production (default), 0.50 high availability.")
@click.option("--redundancy-gpus", type=click.IntRange(min=0), default=None, help="Spare GPUs on top (default 0).")
@click.option("--models", type=click.Choice(["all", "baselines"]), default="all", show_default=True,
              help="baselines: skip the statsmodels candidates (seconds instead of tens of seconds).")
@click.option("--settings", "settings_file", default=None, metavar="FILE",
              help="Plan settings YAML: inputs, sizing, projects, efficiency gains, growth, buffer "
              "(forecasts/plan.yaml is one; flags override it).")
@click.option("--buffer-factor", type=click.FloatRange(1.0, 10.0), default=None,
              help="Multiply the upper peak by this (default 1.0).")
@click.option("--origins", type=click.IntRange(5, 365), default=None, metavar="N",
              help="Backtest origins (default: one a day with two weeks of history before it, at most 30); "
              "twice the default checks that the gate's verdict does not turn on the count.")
@click.option("--growth", "growth_gpus_per_month", type=float, default=None, metavar="GPUS_PER_MONTH",
              help="Expected growth of daily peaks, replacing the measured one.")
@click.option("--html", "html_file", default=None, metavar="FILE", help="Also write a self-contained HTML report "
              "with charts.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (keys in docs/FORECAST.md).")
def plan(history_file: str | None, trace_file: str | None, trace_format: str, cluster_file: str | None,
         horizon: str | None, lead_time: str | None, target_utilisation: float | None,
         redundancy_gpus: int | None, models: str, settings_file: str | None, buffer_factor: float | None,
         origins: int | None, growth_gpus_per_month: float | None, html_file: str | None, as_json: bool) -> None:
    """How many GPUs will we need, when must we order them, and what would greengpu save?

    With no arguments, plans the bundled example in forecasts/ (Philly's public demand, 1,000 GPUs).
    The forecast model ships only if its backtest beats the baselines (docs/FORECAST.md).
    """
    from greengpu.control.plan_main import PlanOptions, run_plan
    from greengpu.report.plan_text import render_text

    if html_file is not None:
        from greengpu.report.plan_html import check_writable

        check_writable(html_file)  # before minutes of backtesting, not after
        inputs = [f for f in (history_file, trace_file, cluster_file, settings_file) if f is not None]
        if any(Path(html_file).resolve() == Path(f).resolve() for f in inputs):
            raise BadInput(f"--html {html_file}: is one of the plan's inputs; the report never overwrites its input")
    options = PlanOptions(history_file, trace_file, trace_format, cluster_file, horizon, lead_time,
                          target_utilisation, redundancy_gpus, baselines_only=models == "baselines",
                          settings_file=settings_file, buffer_factor=buffer_factor,
                          growth_gpus_per_month=growth_gpus_per_month, origins=origins)
    with _phases("greengpu plan") as phase:
        payload, _ = run_plan(options, progress=phase)
    if html_file is not None:
        from greengpu.report.plan_html import write_plan_html

        write_plan_html(payload, html_file)
    if as_json:
        click.echo(json.dumps(payload, indent=2, sort_keys=True))
    else:
        render_text(payload)
        if html_file is not None:
            click.echo(f"HTML report: {html_file}")


@cli.group()
@click.option("--cluster", "cluster_file", default="/etc/greengpu/cluster.yaml", show_default=True, metavar="FILE",
              help="Cluster inventory (MACs and wake targets of the nodes).")
@click.option("--state", "state_file", default="/var/lib/greengpu/state.db", show_default=True, metavar="FILE",
              help="SQLite state: which nodes greengpu put to sleep, and wake-ups under verification.")
@click.option("--policy", "policy_name", default="default", show_default=True, metavar="P",
              help="Policy whose sleep section gives wake timeout, retries and backoff.")
@click.option("--suspend-command", default=None, metavar="TEMPLATE",
              help="Run per node to suspend it ({node} is replaced). Default: ssh NODE greengpu node-suspend "
              "--command 'systemctl poweroff' (docs/SLEEP.md: why power-off).")
@click.option("--ipmi-command", default=None, metavar="TEMPLATE",
              help="Power on nodes with an ipmi_host this way ({node}, {ipmi_host}), e.g. "
              "'ipmitool -I lanplus -H {ipmi_host} -U admin -E chassis power on'.")
@click.option("--log", "log_file", default=None, metavar="FILE",
              help="Log here (Slurm closes the hooks' stdout and stderr).")
@click.pass_context
def slurm(ctx: click.Context, cluster_file: str, state_file: str, policy_name: str, suspend_command: str | None,
          ipmi_command: str | None, log_file: str | None) -> None:
    """Slurm power saving: SuspendProgram and ResumeProgram hooks, and greengpu driving scontrol.

    In slurm.conf (see deploy/slurm/): SuspendProgram and ResumeProgram point at wrappers that run
    `greengpu slurm suspend` and `greengpu slurm resume` with one hostlist argument.
    """
    from greengpu.config.inventory import load_cluster
    from greengpu.config.policy import load_policy
    from greengpu.control.slurm_hooks import DEFAULT_SUSPEND_COMMAND, HookContext, setup_logging

    try:
        setup_logging(log_file)
    except OSError as error:
        raise click.ClickException(f"greengpu slurm: cannot open the log {log_file}: {error}") from None
    with _slurm_step(ctx.invoked_subcommand or ""):
        ctx.obj = HookContext(cluster=load_cluster(cluster_file), store_path=state_file,
                              policy=load_policy(policy_name).sleep,
                              suspend_command=suspend_command or DEFAULT_SUSPEND_COMMAND, ipmi_command=ipmi_command)


@contextmanager
def _slurm_step(name: str) -> Iterator[None]:
    """Refusals and failures of `greengpu slurm NAME` go to its log too; a runtime failure is one line, exit 1."""
    from greengpu.control.slurm_hooks import HookFailure, logged_outcome

    try:
        with logged_outcome(f"greengpu slurm {name}".strip()):
            yield
    except HookFailure as error:
        raise click.ClickException(str(error)) from None


@slurm.command("suspend")
@click.argument("hostlist")
@click.pass_obj
def slurm_suspend(context: Any, hostlist: str) -> None:
    """SuspendProgram: record why each node sleeps and start its suspend command (detached).

    Refuses (exit 1, logged) nodes Slurm reports busy, and everything when scontrol fails.
    """
    from greengpu.control.slurm_hooks import suspend

    with _slurm_step("suspend"):
        code = suspend(context, hostlist)
    if code:
        click.echo(f"greengpu slurm suspend: refused some of {hostlist} (the log says which and why)", err=True)
        raise click.exceptions.Exit(code)


@slurm.command("resume")
@click.argument("hostlist")
@click.pass_obj
def slurm_resume(context: Any, hostlist: str) -> None:
    """ResumeProgram: send wake-on-LAN (or IPMI power-on) to each node; `verify` follows them up."""
    from greengpu.control.slurm_hooks import resume, resume_file_from_env

    with _slurm_step("resume"):
        code = resume(context, hostlist, resume_file_from_env())
    if code:
        raise click.exceptions.Exit(code)


@slurm.command("resume-failed")
@click.argument("hostlist")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of the alerts raised (strings).")
@click.pass_obj
def slurm_resume_failed(context: Any, hostlist: str, as_json: bool) -> None:
    """ResumeFailProgram: Slurm gave up on these nodes; close their wake-ups as failed and log an ALERT."""
    from greengpu.control.slurm_hooks import resume_failed

    with _slurm_step("resume-failed"):
        lines = resume_failed(context, hostlist)
    _echo_lines(lines, as_json)


@slurm.command("verify")
@click.option("--json", "as_json", is_flag=True, help="One JSON array: node, event (send, up, timeout, failed), "
              "message.")
@click.pass_obj
def slurm_verify(context: Any, as_json: bool) -> None:
    """One verification pass: nodes up are done; late ones get another wake-up; failed ones go DOWN."""
    from greengpu.control.slurm_hooks import verify_events

    with _slurm_step("verify"):
        events = verify_events(context)
    _echo_events(events, as_json)


def _echo_events(events: list[Any], as_json: bool) -> None:
    """Wake-verification events: one JSON array, or one line each for people."""
    if as_json:
        click.echo(json.dumps([{"node": e.node, "event": e.kind, "message": e.message} for e in events]))
        return
    for event in events:
        click.echo(event.message)


def _echo_lines(lines: list[str], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(lines))
        return
    for line in lines:
        click.echo(line)


@slurm.command("power-down")
@click.argument("hostlist")
@click.pass_obj
def slurm_power_down(context: Any, hostlist: str) -> None:
    """Ask Slurm to power idle nodes down now (greengpu's planner deciding, not SuspendTime)."""
    from greengpu.control.slurm_hooks import power_down

    with _slurm_step("power-down"):
        power_down(context.cluster, hostlist)


@slurm.command("power-up")
@click.argument("hostlist")
@click.pass_obj
def slurm_power_up(context: Any, hostlist: str) -> None:
    """Ask Slurm to power nodes up now (it runs the ResumeProgram)."""
    from greengpu.control.slurm_hooks import power_up

    with _slurm_step("power-up"):
        power_up(context.cluster, hostlist)


@slurm.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON array: node, state, since_s (epoch), reason.")
@click.pass_obj
def slurm_status(context: Any, as_json: bool) -> None:
    """Nodes greengpu put to sleep or is waking, with why and since when (UTC)."""
    import time

    from greengpu.control.slurm_hooks import status_rows, status_text

    with _slurm_step("status"):
        rows = status_rows(context.store_path)
    if as_json:
        click.echo(json.dumps([dict(zip(("node", "state", "since_s", "reason"), row, strict=True)) for row in rows]))
        return
    for line in status_text(rows, time.time()):
        click.echo(line)


@cli.group()
@click.option("--cluster", "cluster_file", default="/etc/greengpu/cluster.yaml", show_default=True, metavar="FILE")
@click.option("--state", "state_file", default="/var/lib/greengpu/state.db", show_default=True, metavar="FILE")
@click.option("--policy", "policy_name", default="default", show_default=True, metavar="P")
@click.option("--kube-host", default=None, metavar="URL",
              help="API server URL without auth (default: in-cluster config, else kubeconfig).")
@click.option("--suspend-command", default=None, metavar="TEMPLATE",
              help="Run per node to suspend it ({node}). Default: ssh NODE greengpu node-suspend.")
@click.pass_context
def kube(ctx: click.Context, cluster_file: str, state_file: str, policy_name: str, kube_host: str | None,
         suspend_command: str | None) -> None:
    """Kubernetes node sleep: cordon and drain (PodDisruptionBudgets respected), wake for pending GPU pods."""

    from greengpu.backends.wol import Waker
    from greengpu.config.inventory import load_cluster
    from greengpu.config.policy import load_policy
    from greengpu.control.kube_sleep import KUBE_SUSPEND_COMMAND, KubeSleep
    from greengpu.control.sleep_control import SleepControl, start_suspend
    from greengpu.control.state_store import StateStore

    cluster = load_cluster(cluster_file)
    policy = load_policy(policy_name)
    template = suspend_command or KUBE_SUSPEND_COMMAND

    with _kube_step():
        from greengpu.backends.kubernetes import KubeApi, make_api_client

        control = SleepControl(StateStore(state_file), Waker(cluster), policy.sleep)
        ctx.obj = KubeSleep(KubeApi(make_api_client(host=kube_host)), control, cluster, policy,
                            lambda node: start_suspend(template, node))


@contextmanager
def _kube_step() -> Iterator[None]:
    """An unreachable or refusing API server, or a missing client, is one line and exit 1."""
    import sqlite3

    from greengpu.backends.kubernetes import KubeError

    try:
        yield
    except KubeError as error:
        raise click.ClickException(f"kube: {error}") from None
    except (sqlite3.Error, OSError) as error:
        raise click.ClickException(f"kube: {error}") from None


@kube.command("sleep")
@click.argument("node")
@click.option("--reason", default="greengpu: idle", show_default=True)
@click.option("--force", is_flag=True,
              help="Also evict bare pods (nothing recreates them) and pods with emptyDir data, as kubectl drain "
              "--force --delete-emptydir-data.")
@click.option("--drain-timeout-s", type=click.FloatRange(min=0), default=300.0, show_default=True,
              help="How long evicted pods may take to terminate before the sleep is called off (uncordoned).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: node, slept, message.")
@click.pass_obj
def kube_sleep(sleeper: Any, node: str, reason: str, force: bool, drain_timeout_s: float, as_json: bool) -> None:
    """Cordon, drain and suspend NODE; refuses (exit 1) when GPU pods run there, a PDB blocks the drain,
    bare or emptyDir pods are there (without --force) or pods do not terminate in time."""
    sleeper.drain_timeout_s = drain_timeout_s
    with _kube_step():
        outcome = sleeper.sleep(node, reason, force=force)
    if as_json:
        click.echo(json.dumps({"node": outcome.node, "slept": outcome.slept, "message": outcome.message}))
    else:
        click.echo(outcome.message)
    if not outcome.slept:
        raise click.exceptions.Exit(EXIT_FAILURE)


@kube.command("wake-pending")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: woken (the nodes a wake-up went to).")
@click.pass_obj
def kube_wake_pending(sleeper: Any, as_json: bool) -> None:
    """Wake the fewest sleeping nodes that let pending GPU pods run."""
    import time

    with _kube_step():
        woken = sleeper.wake_for_pending(time.time())
    if as_json:
        click.echo(json.dumps({"woken": list(woken)}))
        return
    for node in woken:
        click.echo(f"{node}: wake-up sent")


@kube.command("verify")
@click.option("--json", "as_json", is_flag=True, help="One JSON array: node, event (send, up, timeout, failed, "
              "uncordoned), message.")
@click.pass_obj
def kube_verify(sleeper: Any, as_json: bool) -> None:
    """Close wake-ups of Ready nodes (and uncordon them), retry late ones, fail the lost ones."""
    with _kube_step():
        events = sleeper.verify_events()
    _echo_events(events, as_json)


@cli.command("node-suspend")
@click.option("--command", "suspend_command", default="systemctl suspend", show_default=True,
              help="What puts this node to sleep.")
@click.option("--backend", type=click.Choice(["real", "fake"]), default="real", show_default=True)
@click.option("--fake-gpus", default="4xA100", show_default=True, metavar="SPEC")
@click.option("--fake-busy", default="", metavar="INDEXES")
@click.option("--util-threshold", type=click.FloatRange(0, 1), default=0.2, show_default=True,
              help="A GPU at or above this utilisation counts as busy (the policy's idle_util_threshold).")
@click.option("--dry-run", is_flag=True, help="Check and say what would run; suspend nothing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout: suspended, dry_run, command, "
              "busy (the GPUs that kept the node awake).")
def node_suspend(suspend_command: str, backend: str, fake_gpus: str, fake_busy: str, util_threshold: float,
                 dry_run: bool, as_json: bool) -> None:
    """Run on a node: suspend it, but never while a GPU process runs or a GPU is busy (checked through NVML)."""
    import shlex
    import subprocess

    from greengpu.backends.nvml import NvmlBackend, NvmlUnavailable
    from greengpu.control.agent_main import fake_backend, parse_gpu_indexes

    nvml = fake_backend(fake_gpus, parse_gpu_indexes(fake_busy)) if backend == "fake" else NvmlBackend()
    try:
        count = nvml.open()
    except NvmlUnavailable as error:
        click.echo(f"greengpu node-suspend: {error}", err=True)
        raise click.exceptions.Exit(EXIT_FAILURE) from None
    readings = [nvml.read(i) for i in range(count)]
    nvml.close()
    working = [f"GPU {r.index} (pid {', '.join(map(str, r.pids))})" for r in readings if r.pids]
    working += [f"GPU {r.index} ({r.utilization:.0%} busy)" for r in readings
                if not r.pids and r.utilization >= util_threshold]
    decision = {"suspended": False, "dry_run": dry_run, "command": suspend_command, "busy": working}
    if working:
        if as_json:
            click.echo(json.dumps(decision))
        click.echo(f"greengpu node-suspend: not suspending: work on {', '.join(working)}", err=True)
        raise click.exceptions.Exit(EXIT_FAILURE)
    if dry_run:
        click.echo(json.dumps(decision) if as_json else f"would run: {suspend_command}")
        return
    # With --json, stdout holds the one JSON object: the command's own output goes to file descriptor 2.
    result = subprocess.run(shlex.split(suspend_command), check=False, stdout=2 if as_json else None)
    if result.returncode:
        click.echo(f"greengpu node-suspend: {suspend_command!r} exited {result.returncode}", err=True)
        raise click.exceptions.Exit(EXIT_FAILURE)
    if as_json:
        click.echo(json.dumps({**decision, "suspended": True}))


def _option_variable(path: str, option: click.Option) -> str:
    longest = max(option.opts, key=len).lstrip("-")
    return f"{path}_{longest}".upper().replace("-", "_")


def _check_bounded(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Refuse nan, inf and numbers beyond the input limits in a numeric option.

    click's FloatRange compares, and every comparison with nan is false, so `--target-utilisation nan`
    passed its range; `--growth inf` reached the plan and overflowed there.
    """
    import math

    from greengpu.config.limits import MAX_NUMBER

    for number in value if isinstance(value, tuple) else (value,):
        if isinstance(number, float) and not (math.isfinite(number) and abs(number) <= MAX_NUMBER):
            raise click.BadParameter(f"{number!r} is not a finite number of at most {MAX_NUMBER:g} in magnitude",
                                     ctx, param)
        if isinstance(number, int) and not isinstance(number, bool) and abs(number) > 2**63 - 1:
            raise click.BadParameter(f"{str(number)[:40]} is out of range", ctx, param)
    return value


def _bound_numbers(command: click.Command) -> None:
    """Every float and int option of `command` and its subcommands gets the _check_bounded callback."""
    for param in command.params:
        numeric = isinstance(param.type, (click.types.FloatParamType, click.types.IntParamType))
        if numeric and param.callback is None and not getattr(param, "count", False):
            param.callback = _check_bounded
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _bound_numbers(sub)


def name_environment_variables(command: click.Command, path: str = ENV_PREFIX) -> None:
    """Give every option its documented variable, GREENGPU_<COMMAND>_<OPTION>, named after the option as
    typed (GREENGPU_CHECK_CLUSTER for `check --cluster`), and show it in --help.

    Click's automatic names follow the Python parameter (`cluster_file`), not the option, so the names
    --help promised were never read; these are explicit.
    """
    for param in command.params:
        if isinstance(param, click.Option) and param.expose_value and param.envvar is None:
            param.envvar = _option_variable(path, param)
            param.show_envvar = True
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            name_environment_variables(sub, f"{path}_{name}")


name_environment_variables(cli)
_bound_numbers(cli)


def _one_line(message: str) -> str:
    """The message on one line: a library's text (SQLite quotes a whole table definition) may hold newlines."""
    return " ".join(message.split()) if "\n" in message or "\r" in message else message


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map bad input to exit 2 with one line on stderr."""
    try:
        # Without standalone mode click returns (not raises) the code of a click.exceptions.Exit.
        returned = cli.main(args=argv, prog_name="greengpu", standalone_mode=False)
    except BadInput as exc:
        click.echo(f"greengpu: {_one_line(str(exc))}", err=True)
        return EXIT_BAD_INPUT
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        return EXIT_BAD_INPUT
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "greengpu"
        click.echo(f"{command}: {_one_line(exc.format_message())} (try '{command} --help')", err=True)
        return EXIT_BAD_INPUT
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except ModuleNotFoundError as exc:
        extra = EXTRA_OF_MODULE.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        click.echo(f"greengpu: this command needs the '{extra}' extra ({exc.name} is not installed): "
                   f"python3 -m pip install '.[{extra}]' in the greengpu checkout", err=True)
        return EXIT_FAILURE
    except click.Abort:
        click.echo("greengpu: aborted", err=True)
        return EXIT_FAILURE
    except click.ClickException as exc:
        click.echo(f"greengpu: {exc.format_message()}", err=True)
        return exc.exit_code
    return returned if isinstance(returned, int) else EXIT_OK


def entry_point() -> None:
    """Console-script entry: exit with main()'s code."""
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
