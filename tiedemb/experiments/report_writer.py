"""The report of a folder of runs: tables (Markdown and CSV), figures, ``report.md``, a W&B report run.

Everything is written into the folder itself, each file atomically::

    report.md                 the tables, figures and notes together
    tied_embeddings.csv       the tied-embedding table (mean, std and n columns per statistic)
    embedding_dim.csv         the embedding-dimension table
    embedding_analysis.csv    effective rank, isotropy and cosines per setting
    runs.csv                  every run and its state
    loss_curves.png, dev_score_vs_de.png, effective_rank_vs_de.png

and, unless ``wandb=False``, one W&B run (job type ``report``) with the tables as ``wandb.Table``,
the curves as W&B line charts (``tiedemb.experiments.charts``) and the PNG figures as images. It
goes online or offline as training runs do (``tiedemb.training.wandb_mode``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tiedemb.errors import UserError
from tiedemb.experiments import evidence, layout, plots, width_study
from tiedemb.experiments.aggregate import (
    Interval,
    Stat,
    Table,
    embedding_dim_of,
    embedding_dim_table,
    group_runs,
    label_columns,
    runs_table,
    sort_value,
    summarise,
    task_of,
    tied_table,
)
from tiedemb.experiments.analysis import EmbeddingAnalysis, analyse_checkpoint
from tiedemb.experiments.charts import Chart, dev_score_charts, effective_rank_chart, log_charts, loss_charts
from tiedemb.experiments.claims import Analysis, parse_analysis
from tiedemb.experiments.runs import Run, find_runs
from tiedemb.training.files import atomic_write_text
from tiedemb.training.wandb_mode import choose_wandb_mode

REPORT_FILE = "report.md"
GAP_FIGURE = "gap_to_full_width.png"  # a width study's gap to the full width against steps
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
    stat_columns = {column for column in table.columns if any(isinstance(row.get(column), Stat) for row in table.rows)}
    interval_columns = {
        column for column in table.columns if any(isinstance(row.get(column), Interval) for row in table.rows)
    }
    columns: list[str] = []
    for column in table.columns:
        if column in stat_columns:
            columns += [f"{column} mean", f"{column} std", f"{column} n"]
        elif column in interval_columns:
            columns += [f"{column} low", f"{column} high"]
        else:
            columns.append(column)
    rows = []
    for row in table.rows:
        values: list[Any] = []
        for column in table.columns:
            value = row.get(column)
            if column in stat_columns:
                values += [value.mean, value.std, value.n] if isinstance(value, Stat) else [value, None, None]
            elif column in interval_columns:
                half = value.stat.ci95 if isinstance(value, Interval) else None
                values += [None, None] if half is None else [value.stat.mean - half, value.stat.mean + half]
            else:
                values.append(value)
        rows.append(values)
    return columns, rows


CONFIGS_FOLDER = "configs"
"""Beside the report: every run's resolved configuration, as ``configs/<run>.yaml``."""
OUT_FOLDER = "<out>"
"""What a configuration written beside the report says for the folder of runs (a sweep's ``--out``)."""


def write_run_configs(runs: list[Run], root: Path) -> list[Path]:
    """Write each run's resolved configuration (as the run recorded it) to ``configs/<run>.yaml``.

    The machine's paths are taken out, so that the folder can be published: the folder of runs
    reads ``<out>``, and the folder a cell was started in is left out (paths relative to it stay).
    """
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


def write_csv(table: Table, path: Path) -> Path:
    return write_rows(*flat_rows(table), path)


def write_rows(columns: list[str], rows: list[list[Any]], path: Path) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(columns)
    writer.writerows([["" if value is None else value for value in row] for row in rows])
    atomic_write_text(path, buffer.getvalue())
    return path


# --------------------------------------------------------------------------- embedding analyses


def analyse_runs(runs: list[Run], echo: Callable[[str], None]) -> dict[str, EmbeddingAnalysis]:
    """Analyses of each finished run's newest last checkpoint, by run id (runs without one are left out)."""
    results: dict[str, EmbeddingAnalysis] = {}
    for run in runs:
        if not run.ok or run.kind not in ("pretrain", "glue"):
            continue
        checkpoints = run.checkpoints()
        if not checkpoints:
            continue
        try:
            results[run.id] = analyse_checkpoint(checkpoints[0], run.tokenizer())
        except UserError as error:
            echo(f"note: no embedding analysis for {run.id}: {error}")
    return results


def analysis_table(runs: list[Run], analyses: dict[str, EmbeddingAnalysis]) -> Table:
    chosen = [run for run in runs if run.id in analyses]
    groups = group_runs(chosen)
    labels = label_columns(groups)
    columns = [
        "study",
        *labels,
        "runs",
        "effective rank",
        "effective rank / d_e",
        "encoder-input effective rank",
        "isotropy",
        "random-pair cosine",
        "frequency-matched cosine",
        "near-synonym cosine",
        "synonym gap",
        "synonym pairs",
    ]
    rows = []
    for (study, key), members in groups.items():
        results = [analyses[run.id] for run in members]
        rows.append(
            {
                "study": study,
                **dict(key),
                "runs": len(members),
                "effective rank": summarise(r.effective_rank for r in results),
                "effective rank / d_e": summarise(r.effective_rank_share for r in results),
                "encoder-input effective rank": summarise(r.encoder_input_effective_rank for r in results),
                "isotropy": summarise(r.isotropy for r in results),
                "random-pair cosine": summarise(r.random_pair_cosine for r in results),
                "frequency-matched cosine": summarise(r.matched_random_cosine for r in results),
                "near-synonym cosine": summarise(r.synonym_cosine for r in results),
                "synonym gap": summarise(r.synonym_gap for r in results),
                "synonym pairs": max(r.synonym_pairs for r in results) or None,
            }
        )
    rows.sort(key=lambda row: [row["study"], *(sort_value(str(row.get(label, ""))) for label in labels)])
    notes = [
        "on each run's last checkpoint; mean ± sample std over seeds",
        "effective rank: exp of the entropy of the normalised singular values of the token embedding; "
        "encoder-input effective rank: the same of the table as the encoder receives it, norm(E P^T)",
        "isotropy: min/max over the eigenvectors c of E^T E of Z(c) = sum_i exp(c . w_i) (1 = isotropic)",
        "near-synonym cosine: mean over word pairs (good/great, big/large, ...) that are single tokens of the "
        "run's tokenizer; – where the run has no word tokenizer (the embedded corpus)",
        "frequency-matched cosine: random pairs whose tokens have the frequency ranks (in the run's training "
        "text) of each synonym pair's words; synonym gap: near-synonym cosine minus it (minus the uniform "
        "random-pair cosine where no training text is known)",
    ]
    return Table(
        name="embedding_analysis",
        title="Embedding analyses",
        columns=columns,
        rows=rows,
        notes=notes,
        digits={"runs": 0, "effective rank": 1, "synonym pairs": 0},
    )


def _analysis_columns(analyses: dict[str, EmbeddingAnalysis]) -> Callable[[list[Run]], dict[str, Any]]:
    def columns(members: list[Run]) -> dict[str, Any]:
        results = [analyses[run.id] for run in members if run.id in analyses]
        return {
            "effective rank": summarise(r.effective_rank for r in results),
            "near-synonym cosine": summarise(r.synonym_cosine for r in results),
            "random-pair cosine": summarise(r.random_pair_cosine for r in results),
            "synonym gap": summarise(r.synonym_gap for r in results),
        }

    return columns


def _rank_points(runs: list[Run], analyses: dict[str, EmbeddingAnalysis]) -> dict[str, dict[int, list[float]]]:
    points: dict[str, dict[int, list[float]]] = {}
    for run in runs:
        dim = embedding_dim_of(run)
        if run.id not in analyses or dim is None:
            continue
        if run.kind == "glue":
            name = f"fine-tuned on {task_of(run).upper()}"
        else:
            variant = run.labels.get("variant") or run.hparams.get("head") or ""
            name = f"pretrained{f' ({variant})' if variant else ''}"
        points.setdefault(name, {}).setdefault(dim, []).append(analyses[run.id].effective_rank)
    return points


# --------------------------------------------------------------------------- the report


def study_analysis(manifest: dict[str, Any], echo: Callable[[str], None]) -> Analysis | None:
    """The claims the sweep stated: as recorded when it ran, else as its sweep file states them now."""
    studies = list(dict.fromkeys(str(cell.get("study")) for cell in manifest.get("cells", [])))
    try:
        if manifest.get("analysis"):
            return parse_analysis(manifest["analysis"], studies, "sweep.json")
        path = manifest.get("sweep_file")
        if path and Path(path).is_file():
            from tiedemb.experiments.sweep_file import load_sweep

            return load_sweep(path).analysis
    except UserError as error:
        echo(f"note: the sweep's claims could not be read, so no verdicts are given: {error}")
    return None


def build_report(
    root: str | Path,
    target_loss: float | None = None,
    at_steps: list[int] | None = None,
    wandb: bool = True,
    analyses: bool = True,
    echo: Callable[[str], None] = print,
) -> Path:
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
    numbers = evidence.collect(runs, claims)
    results = analyse_runs(runs, echo) if analyses else {}
    tied = tied_table(runs, target_loss, at_steps, default_target=not (claims and claims.targets))
    dims = embedding_dim_table(runs, extra=_analysis_columns(results) if results else None)
    if claims is not None and claims.common_target is not None:  # a width study: downstream only above the floor
        dims.notes += width_study.downstream_notes(dims)
    tables = [tied, dims, analysis_table(runs, results), runs_table(runs)]
    evidence_tables = [
        evidence.baselines_table(numbers),
        evidence.convergence_table(numbers, claims),
        evidence.differences_table(numbers, claims),
        evidence.claims_table(numbers, claims),
        *width_study.width_tables(numbers, claims),
        evidence.zero_shot_table(runs),
        evidence.run_metrics_table(runs, claims),
    ]
    for table in [*tables, *evidence_tables]:
        write_csv(table, root / f"{table.name}.csv")
    write_rows(*evidence.curve_rows(runs), root / "curves.csv")
    write_run_configs(runs, root)
    if not plots.available():
        echo(f"note: {plots.MISSING}")
    rank_points = _rank_points(runs, results)
    figures = {
        "loss_curves.png": plots.loss_curves(runs, root / "loss_curves.png"),
        "dev_score_vs_de.png": plots.dev_score_vs_dim(dims.rows, dims.score_columns, root / "dev_score_vs_de.png"),
        "effective_rank_vs_de.png": plots.effective_rank_vs_dim(rank_points, root / "effective_rank_vs_de.png"),
    }
    if claims is not None and claims.common_target is not None:  # a width study
        figures[GAP_FIGURE] = plots.gap_to_full_width(
            width_study.gap_curves(numbers, claims), claims.reference, root / GAP_FIGURE
        )
    text = render_markdown(root, manifest, runs, tables, figures, evidence_tables, evidence.seed_statement(runs))
    atomic_write_text(root / REPORT_FILE, text)
    if wandb:
        charts = {
            **loss_charts(plots.loss_panels(runs)),
            **dev_score_charts(dims.rows, dims.score_columns),
            **effective_rank_chart(rank_points),
        }
        log_report_to_wandb(
            root, manifest, tables, [path for path in figures.values() if path is not None], echo, charts
        )
    return root / REPORT_FILE


def render_markdown(
    root: Path,
    manifest: dict[str, Any],
    runs: list[Run],
    tables: list[Table],
    figures: dict[str, Path | None],
    evidence_tables: list[Table] | None = None,
    seeds: str | None = None,
) -> str:
    tied, dims, analysis, _ = tables
    name = manifest.get("name") or root.name
    states: dict[str, int] = {}
    for run in runs:
        states[run.state] = states.get(run.state, 0) + 1
    lines = [f"# Report: {name}", ""]
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
    expected = {cell["id"] for cell in manifest.get("cells", [])}
    missing = sorted(expected - {run.id for run in runs})
    for study, reason in (manifest.get("skipped_studies") or {}).items():
        lines += [f"> Study `{study}` was skipped: {reason}.", ""]
    if missing:
        lines += [
            f"> {len(missing)} cells of the sweep have not started: {', '.join(missing[:10])}"
            f"{' ...' if len(missing) > 10 else ''}",
            "",
        ]
    if seeds:
        lines += [f"- seeds: {seeds}"]
    lines += [""]
    evidence_tables = [table for table in evidence_tables or [] if table.rows and table.name != "run_metrics"]
    if evidence_tables:
        lines += ["## Evidence: baselines, convergence, paired differences and verdicts", ""]
        for table in evidence_tables:
            lines += [f"### {table.title}", "", markdown_table(table)]
    if figures.get(GAP_FIGURE):
        caption = "Each width's validation loss minus the full width's against steps; band: the seeds' range"
        lines += [f"![{caption}]({GAP_FIGURE})", ""]
    lines += ["## 1. Tied embeddings", "", markdown_table(tied)]
    if figures.get("loss_curves.png"):
        lines += [
            "![Validation loss per variant; circles: measured initial loss, crosses: predicted, dashed: ln n]"
            "(loss_curves.png)",
            "",
        ]
    lines += ["## 2. Embedding dimension", "", markdown_table(dims)]
    for figure, caption in (
        ("dev_score_vs_de.png", "Dev score and total parameters against d_e"),
        ("effective_rank_vs_de.png", "Effective rank of the token embedding against d_e"),
    ):
        if figures.get(figure):
            lines += [f"![{caption}]({figure})", ""]
    lines += ["## 3. Embedding analyses", "", markdown_table(analysis)]
    not_averaged = [run for run in runs if not run.ok]
    lines += ["## 4. Runs not averaged", ""]
    if not_averaged:
        lines += [
            "These runs failed or did not finish; no table above includes them.",
            "",
            "| run | state | last message |",
            "|---|---|---|",
        ]
        lines += [
            f"| {run.id} | {run.state} | {(run.message.splitlines() or [''])[-1][:200].replace('|', '/')} |"
            for run in not_averaged
        ]
        lines.append("")
    else:
        lines += ["None: every run finished.", ""]
    names = [table.name for table in tables] + [table.name for table in evidence_tables] + ["run_metrics", "curves"]
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
    charts: dict[str, Chart] | None = None,
) -> None:
    """The tables, charts and figures as one W&B run (job type ``report``).

    Online or offline as a training run would be (``choose_wandb_mode``): offline without
    credentials or when the server does not answer, online otherwise; a ``WANDB_MODE`` the user
    set is kept.
    """
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
        log_charts(run, charts or {})
        run.log({f"report/{path.stem}": wandb.Image(str(path)) for path in images})
    finally:
        run.finish()
    where = f" (offline: `wandb sync {folder}/wandb/offline-run-*`)" if run.offline else ""
    echo(f"logged the tables, charts and figures to W&B run {run.id} under {folder}{where}")


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, float, str)) else str(value)
