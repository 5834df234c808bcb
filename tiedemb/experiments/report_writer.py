"""The report of a folder of runs, written into the folder, each file atomically: ``report.md``, the
tables (one CSV each) and figures of the sections the sweep file declares (``sections.py``), what
every report writes (``runs.csv``, ``run_metrics.csv``, ``curves.csv``, ``configs/<run>.yaml``), and
one W&B run (job type ``report``) with the tables and figures.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tiedemb.errors import UserError
from tiedemb.experiments import evidence, layout, plots
from tiedemb.experiments.aggregate import Interval, Stat, Table, runs_table
from tiedemb.experiments.claims import Analysis, parse_analysis
from tiedemb.experiments.runs import Run, find_runs
from tiedemb.experiments.sections import EVIDENCE_HEADING, Inputs, Part, build_parts, default_report, parse_report
from tiedemb.training.files import atomic_write_text
from tiedemb.training.hub import choose_wandb_mode

REPORT_FILE = "report.md"
WANDB_DIR = ".report"  # hidden: the report's own W&B run is never read back as a run


def format_value(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, (Stat, Interval)):
        return value.format(digits)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(table: Table) -> str:
    if not table.rows:
        return "_No runs for this table._\n"
    header = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    body = [
        "| "
        + " | ".join(
            format_value(row.get(column), table.digits.get(column, 3)).replace("|", "\\|") for column in table.columns
        )
        + " |"
        for row in table.rows
    ]
    notes = [f"- {note}" for note in table.notes]
    return "\n".join([header, rule, *body, "", *notes]) + "\n"


def flat_rows(table: Table) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows with every statistic spread over ``mean``, ``std`` and ``n`` columns, and
    every confidence interval over ``low`` and ``high``."""
    kinds = {
        column: next(
            (kind for kind in (Stat, Interval) if any(isinstance(row.get(column), kind) for row in table.rows)), None
        )
        for column in table.columns
    }

    def spread(value: Any, kind: type | None) -> list[Any]:
        if kind is Stat:
            return [value.mean, value.std, value.n] if isinstance(value, Stat) else [value, None, None]
        if kind is Interval:
            half = value.stat.ci95 if isinstance(value, Interval) else None
            return [None, None] if half is None else [value.stat.mean - half, value.stat.mean + half]
        return [value]

    suffixes = {Stat: ("mean", "std", "n"), Interval: ("low", "high")}
    columns = [
        f"{column} {suffix}" if kind else column
        for column, kind in kinds.items()
        for suffix in suffixes.get(kind, ("",))
    ]
    rows = [[value for column, kind in kinds.items() for value in spread(row.get(column), kind)] for row in table.rows]
    return columns, rows


CONFIGS_FOLDER = "configs"
OUT_FOLDER = "<out>"  # what a configuration written beside the report says for the folder of runs


def write_run_configs(runs: list[Run], root: Path) -> list[Path]:
    """Each run's resolved configuration in ``configs/<run>.yaml``, without the machine's paths, so that
    the folder can be published: the folder of runs reads ``<out>``, the folder a cell started in is left out."""
    import yaml

    written = []
    for run in runs:
        if not run.config:
            continue
        text = yaml.safe_dump(run.config, sort_keys=False, allow_unicode=True)
        text = text.replace(str(root.resolve()), OUT_FOLDER).replace(str(root), OUT_FOLDER)
        if run.workdir is not None:
            text = text.replace(f"{run.workdir}/", "")
        path = root / CONFIGS_FOLDER / f"{run.id}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
        written.append(path)
    return written


def write_rows(columns: list[str], rows: list[list[Any]], path: Path) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(columns)
    writer.writerows([["" if value is None else value for value in row] for row in rows])
    atomic_write_text(path, buffer.getvalue())
    return path


# --------------------------------------------------------------------------- the report


def study_analysis(manifest: dict[str, Any], echo: Callable[[str], None]) -> Analysis | None:
    """The claims the sweep declared, as its ``sweep.json`` recorded them."""
    if not manifest.get("analysis"):
        return None
    studies = list(dict.fromkeys(str(cell.get("study")) for cell in manifest.get("cells", [])))
    try:
        return parse_analysis(manifest["analysis"], studies, "sweep.json")
    except UserError as error:
        echo(f"note: the sweep's claims could not be read, so no verdicts are given: {error}")
        return None


def build_report(root: str | Path, wandb: bool = True, echo: Callable[[str], None] = print) -> Path:
    """Write every report file into ``root``; return the path of ``report.md``."""
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"{str(root)!r} is not a folder of runs")
    runs = find_runs(root)
    if not runs:
        raise UserError(
            f"{str(root)!r} holds no runs: no sweep cells (cell.json) and no metrics "
            "(the metrics.csv files Lightning's CSVLogger writes); run a sweep into it first"
        )
    manifest = layout.read_json(root / layout.MANIFEST_FILE) or {}
    claims = study_analysis(manifest, echo)
    inputs = Inputs(root, runs, claims, echo)
    if not plots.available():
        echo(f"note: {plots.MISSING}")
    try:
        sections = parse_report(manifest.get("report"), claims, "sweep.json") or default_report()
    except UserError as error:  # a width kind without the claims it reads: the rest of the report
        echo(f"note: {error}")
        sections = default_report()
    parts = build_parts(sections, inputs)
    tables = [table for part in parts for table in part.tables]
    always = [runs_table(runs), evidence.run_metrics_table(runs, claims)]
    for table in [*tables, *always]:
        write_rows(*flat_rows(table), root / f"{table.name}.csv")
    write_rows(*evidence.curve_rows(runs), root / "curves.csv")
    write_run_configs(runs, root)
    text = render_markdown(root, manifest, runs, parts, evidence.seed_statement(runs))
    atomic_write_text(root / REPORT_FILE, text)
    if wandb:
        images = [path for part in parts for _, path in part.figures if path is not None]
        log_report_to_wandb(root, manifest, [*tables, always[0]], images, echo)
    return root / REPORT_FILE


def _header(root: Path, manifest: dict[str, Any], runs: list[Run], seeds: str | None) -> list[str]:
    states: dict[str, int] = {}
    for run in runs:
        states[run.state] = states.get(run.state, 0) + 1
    lines = [f"# Report: {manifest.get('name') or root.name}", ""]
    if manifest.get("description"):
        lines += [manifest["description"], ""]
    if manifest.get("sweep_file"):
        # the file's name only: where it lay on the machine that ran the sweep says nothing to a reader
        lines += [f"- sweep file: `{Path(manifest['sweep_file']).name}`"]
    lines += [
        f"- generated: {datetime.now(timezone.utc).isoformat(timespec='seconds')}",
        f"- runs: {len(runs)} ({', '.join(f'{count} {state}' for state, count in sorted(states.items()))}); "
        f"averaged: {sum(run.ok for run in runs)}",
        "",
    ]
    for study, reason in (manifest.get("skipped_studies") or {}).items():
        lines += [f"> Study `{study}` was skipped: {reason}.", ""]
    missing = sorted({cell["id"] for cell in manifest.get("cells", [])} - {run.id for run in runs})
    if missing:
        lines += [
            f"> {len(missing)} cells of the sweep have not started: {', '.join(missing[:10])}"
            f"{' ...' if len(missing) > 10 else ''}",
            "",
        ]
    return [*lines, *([f"- seeds: {seeds}"] if seeds else []), ""]


def render_markdown(
    root: Path, manifest: dict[str, Any], runs: list[Run], parts: list[Part], seeds: str | None = None
) -> str:
    """The header, then each section in the order declared: evidence under one heading (tables with
    rows only), chapters numbered."""
    lines = _header(root, manifest, runs, seeds)
    shown: dict[bool, list[str]] = {True: [], False: []}  # chapters' tables, evidence's
    chapter = 0
    for part in parts:
        tables = part.tables if part.heading else [table for table in part.tables if table.rows]
        if part.heading:
            chapter += 1
            lines += [f"## {chapter}. {part.heading}", ""]
            lines += [markdown_table(table) for table in tables]
        else:
            if tables and EVIDENCE_HEADING not in lines:
                lines += [EVIDENCE_HEADING, ""]
            for table in tables:
                lines += [f"### {table.title}", "", markdown_table(table)]
        lines += part.lines
        lines += [line for figure in part.figures if figure[1] is not None for line in (figure[0], "")]
        shown[bool(part.heading)] += [table.name for table in tables]
    names = [*shown[True], "runs", *shown[False], "run_metrics", "curves"]
    lines += [
        "Tables as CSV: " + ", ".join(f"`{name}.csv`" for name in dict.fromkeys(names)) + " (curves: every "
        "run's validation losses at every evaluation; run_metrics: every run's final metrics). "
        f"`{CONFIGS_FOLDER}/<run>.yaml`: each run's resolved configuration, the folder of runs written "
        f"`{OUT_FOLDER}`.",
        "",
    ]
    return "\n".join(lines)


def log_report_to_wandb(
    root: Path,
    manifest: dict[str, Any],
    tables: list[Table],
    images: list[Path],
    echo: Callable[[str], None],
) -> None:
    """The tables and figures as one W&B run (job type ``report``), online or offline as a training
    run would be (``choose_wandb_mode``); W&B draws the curves itself from the training runs."""
    try:
        import wandb
    except ImportError:
        echo("note: wandb is not installed; the report is not logged to W&B")
        return
    choose_wandb_mode()
    settings = manifest.get("wandb") or {}
    folder = root / WANDB_DIR
    folder.mkdir(exist_ok=True)
    name = manifest.get("name") or root.name
    run = wandb.init(
        project=settings.get("project", "tiedemb"),
        entity=settings.get("entity"),
        group=name,
        job_type="report",
        name=f"{name} report",
        tags=[f"experiment={name}", "report"],
        dir=str(folder),
        reinit="finish_previous",
        # a busy machine can take longer than the default 90 s to start W&B's service
        settings=wandb.Settings(init_timeout=300),
    )
    try:
        for table in tables:
            columns, rows = flat_rows(table)
            run.log(
                {f"report/{table.name}": wandb.Table(columns=columns, data=[[_plain(v) for v in row] for row in rows])}
            )
        run.log({f"report/{path.stem}": wandb.Image(str(path)) for path in images})
    finally:
        run.finish()
    where = f" (offline: `wandb sync {folder}/wandb/offline-run-*`)" if run.offline else ""
    echo(f"logged the tables and figures to W&B run {run.id} under {folder}{where}")


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, float, str)) else str(value)
