"""Sweep files: a study's base configs, a grid of settings and overrides, expanded into cells.

A sweep file is YAML::

    name: smoke                          # the experiment: W&B group, tag and report title
    description: ...
    wandb: {project: tiedemb}            # or false: CSV metrics only
    threads: 1                           # OMP_NUM_THREADS of each cell: a deterministic rerun repeats to the bit
    configs: [../tied.yaml]              # base configs, relative to this file (every study)
    overrides: {trainer.max_steps: 200}  # CLI keys and values (every cell)
    studies:                             # optional; without it the file itself is the one study
      tied:
        configs: [../scale/tiny.yaml]
        requires: [data/glue/MRPC]              # paths that must exist (relative to the working
                                                # folder), else the study is skipped, saying why
        grid:
          model.head: [tied, untied]            # a CLI key and its values
          variant:                              # or a named axis whose levels are bundles
            t5: {configs: [../tied_t5.yaml], overrides: {...}}
          seed_everything: [0, 1, 2]
        rules:                                  # per-cell overrides, or cells left out
          - where: {variant: t5, seed: 0}
            overrides: {trainer.max_steps: 10}
          - where: {task: mnli, d_e: 128}
            skip: true
        test: best                              # after fit, `test` on the best (or last) checkpoint
        command: fit                            # or similarity: the zero-shot probe, no training
      mrpc:                                     # a chained study: each cell fine-tunes from the
        configs: [../glue/mrpc.yaml]            # last checkpoint of one cell of another study
        pretrained_from:
          study: tied                           # the upstream study (itself not chained)
          match: [seed]                         # labels equal between this cell and the upstream one
          labels: {variant: tied}               # fixed labels of the upstream cell (optional)
        grid: {model.embedding_dim: [32, 64], seed_everything: [0, 1, 2]}
    analysis: {axis: variant, reference: tied, claims: [...]}   # what the report decides (claims.py)
    report: [baselines, claims, {kind: embedding_dim, downstream: true}]   # its sections (sections.py)

Every cell is one ``main.py fit`` run: the configs in order (file, study, named levels), then
the overrides as ``--key=value`` flags (file, study, levels, rules, grid values). Each axis has a
label naming it in folders, tags and tables: ``model.head`` -> ``variant``,
``model.embedding_dim`` -> ``d_e``, ``seed_everything`` -> ``seed``, ``data.task`` -> ``task``,
another key -> its last part, a named axis -> its name.

A chained cell names exactly one upstream cell (else the file is refused). The checkpoint's path
is only known once the upstream cell has run: it is passed as ``--model.pretrained=PATH`` after
every override, and the cell's spec names the upstream cell's id and spec instead, so a moved
output folder is still the same sweep. A chained cell whose upstream cell has not finished is
recorded as waiting; a later run of the sweep runs it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from tiedemb.data.preparing import prepare_hint
from tiedemb.errors import UserError
from tiedemb.experiments.claims import Analysis, check_keys, mapping_of, parse_analysis
from tiedemb.experiments.sections import parse_report
from tiedemb.training.shipped_configs import resolve_config

SHARED_KEYS = ("configs", "overrides", "grid", "rules", "requires", "test")  # the file's for every study
FILE_KEYS = ("name", "description", "wandb", "threads", *SHARED_KEYS, "studies", "analysis", "report")
STUDY_KEYS = ("description", *SHARED_KEYS, "pretrained_from", "command")
COMMAND_CHOICES = ("fit", "similarity")
LEVEL_KEYS = ("configs", "overrides")
RULE_KEYS = ("where", "overrides", "skip")
WANDB_KEYS = ("project",)
TEST_CHOICES = ("best", "last")
CHAIN_KEYS = ("study", "match", "labels")
CHAIN_KEY = "model.pretrained"  # the CLI key that receives the upstream cell's last checkpoint

#: Labels of the axes that the reports and dashboards know by name.
AXIS_LABELS = {"model.head": "variant", "model.embedding_dim": "d_e", "seed_everything": "seed", "data.task": "task"}


@dataclass(frozen=True)
class Cell:
    """One run of the sweep."""

    study: str
    labels: dict[str, str]  # axis label -> value as written in folder names and tags
    configs: tuple[Path, ...]
    overrides: dict[str, Any]  # CLI key -> value, later entries winning
    test: str | None
    index: int = 0  # position in the whole sweep: what --cell names (e.g. a job array's task id)
    root: Path = Path(".")  # the sweep file's folder: configs are named relative to it in the spec
    upstream: Cell | None = None  # a chained cell: the cell whose last checkpoint it starts from
    command: str = "fit"  # the subcommand the cell runs (COMMAND_CHOICES)

    @property
    def id(self) -> str:
        """``study/label=value,...``: the cell's folder under the output folder, and its W&B name."""
        name = ",".join(f"{label}={value}" for label, value in self.labels.items()) or "run"
        return f"{self.study}/{name}"

    def spec(self) -> dict[str, Any]:
        """What decides the run's results: a finished cell with another spec is a different cell."""
        configs = [os.path.relpath(path, self.root) for path in self.configs]  # a moved checkout is the same sweep
        spec = {
            "study": self.study,
            "labels": self.labels,
            "configs": configs,
            "overrides": self.overrides,
            "test": self.test,
        }
        if self.upstream is not None:  # only then: the hashes of unchained cells stay as they were
            spec["pretrained_from"] = self.upstream_spec()
        if self.command != "fit":  # likewise: fitting cells keep their hashes
            spec["command"] = self.command
        return spec

    def upstream_spec(self) -> dict[str, Any]:
        """The upstream cell's id and spec, never its path: the path changes when the folder moves.
        (checkpoint and key: once options, kept so that finished cells keep their hashes)"""
        assert self.upstream is not None
        return {"cell": self.upstream.id, "spec_hash": self.upstream.spec_hash, "checkpoint": "last", "key": CHAIN_KEY}

    @property
    def spec_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.spec(), sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Chain:
    study: str
    match: tuple[str, ...]
    labels: dict[str, str]


@dataclass
class Study:
    name: str
    cells: list[Cell]
    skipped_because: str | None = None  # a missing required path: the study is not run
    labels: tuple[str, ...] = ()  # its grid's axis labels, in order
    chain: Chain | None = None


@dataclass
class Sweep:
    path: Path
    name: str
    description: str
    wandb: dict[str, Any] | None  # None: no W&B logger
    threads: int | None = None  # OMP_NUM_THREADS of each cell's process; None: the machine's default
    studies: list[Study] = field(default_factory=list)
    analysis: Analysis | None = None  # the claims the report decides (experiments/claims.py)
    report: list[dict[str, Any]] | None = None  # the report's sections (experiments/sections.py); None: the default

    @property
    def cells(self) -> list[Cell]:
        """The cells to run: those of every study that is not skipped."""
        return [cell for study in self.studies if not study.skipped_because for cell in study.cells]

    @property
    def all_cells(self) -> list[Cell]:
        """Every cell, skipped studies included: array indices stay the same on every machine."""
        return [cell for study in self.studies for cell in study.cells]

    def study(self, name: str) -> Study:
        return next(study for study in self.studies if study.name == name)

    def run_order(self, cells: list[Cell]) -> list[Cell]:
        """``cells`` with every upstream study's cells before those of the studies chained to it."""
        return sorted(cells, key=lambda cell: cell.upstream is not None)  # stable: file order otherwise


def format_value(value: Any) -> str:
    """A setting as it appears in labels."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def axis_label(key: str) -> str:
    return AXIS_LABELS.get(key, key.rsplit(".", 1)[-1])


def load_sweep(path: str | Path, workdir: str | Path | None = None) -> Sweep:
    """Read and check a sweep file; raises ``UserError`` naming the place and key of any mistake.
    ``workdir``: where ``requires`` paths are looked up (the current folder when unset)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise UserError(f"sweep file {str(path)!r} does not exist")
    try:
        content = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise UserError(f"sweep file {str(path)!r} is not valid YAML: {error}") from None
    where = f"sweep file {str(path)!r}"
    content = mapping_of(content, where)
    check_keys(content, FILE_KEYS, where)
    name = str(content.get("name") or file.stem)
    base = file.resolve().parent
    workdir = Path(workdir or Path.cwd())
    sweep = Sweep(
        path=file,
        name=name,
        description=str(content.get("description") or ""),
        wandb=_wandb_settings(content.get("wandb", {}), where),
        threads=_threads(content.get("threads"), where),
    )
    shared = {key: content[key] for key in SHARED_KEYS if key in content}
    studies = content.get("studies")
    raw_studies = {name: {}} if studies is None else mapping_of(studies, f"{where}: studies")
    index = 0
    for study_name, raw in raw_studies.items():
        study_where = f"{where}: study {study_name!r}"
        raw = mapping_of(raw, study_where)
        check_keys(raw, STUDY_KEYS, study_where)
        study = _expand_study(str(study_name), shared, raw, base, workdir, study_where, index)
        index += len(study.cells)
        sweep.studies.append(study)
    if not sweep.all_cells:
        raise UserError(f"{where}: no cells to run (no studies, or every cell left out by a rule)")
    for study in sweep.studies:
        if study.chain is not None:
            _link(study, study.chain, sweep.studies, f"{where}: study {study.name!r}: pretrained_from")
    sweep.analysis = parse_analysis(content.get("analysis"), [study.name for study in sweep.studies], where)
    sweep.report = parse_report(content.get("report"), sweep.analysis, where)
    return sweep


# --------------------------------------------------------------------------- expansion


@dataclass(frozen=True)
class _Level:
    label: str
    value: str
    configs: tuple[Path, ...] = ()
    overrides: tuple[tuple[str, Any], ...] = ()


def _expand_study(
    name: str, shared: dict[str, Any], own: dict[str, Any], base: Path, workdir: Path, where: str, start: int
) -> Study:
    configs = _configs(shared.get("configs", []), base, f"{where} (file-level configs)") + _configs(
        own.get("configs", []), base, where
    )
    overrides = {**_overrides(shared.get("overrides", {}), where), **_overrides(own.get("overrides", {}), where)}
    test = own.get("test", shared.get("test")) or None
    if test not in (None, *TEST_CHOICES):
        raise UserError(
            f"{where}: test={test!r} is not a known choice; valid: {', '.join(TEST_CHOICES)} (or leave it out)"
        )
    command = own.get("command", "fit")
    if command not in COMMAND_CHOICES:
        raise UserError(f"{where}: command={command!r} is not a known choice; valid: {', '.join(COMMAND_CHOICES)}")
    grid = {**mapping_of(shared.get("grid", {}), f"{where}: grid"), **mapping_of(own.get("grid", {}), f"{where}: grid")}
    axes = [_axis(str(key), values, base, f"{where}: grid.{key}") for key, values in grid.items()]
    labels = [axis[0].label for axis in axes]
    duplicated = sorted({label for label in labels if labels.count(label) > 1})
    if duplicated:
        raise UserError(f"{where}: two grid axes share the label {duplicated[0]!r}; name one of them as a named axis")
    rules = [
        _rule(rule, labels, f"{where}: rules[{number}]")
        for number, rule in enumerate([*(shared.get("rules") or []), *(own.get("rules") or [])])
    ]
    required = [str(entry) for entry in [*(shared.get("requires") or []), *(own.get("requires") or [])]]
    missing = [entry for entry in required if not (workdir / Path(entry).expanduser()).exists()]
    chain = _chain(own["pretrained_from"], f"{where}: pretrained_from") if "pretrained_from" in own else None
    study = Study(name=name, cells=[], labels=tuple(labels), chain=chain)
    if missing:
        study.skipped_because = (
            f"required path {missing[0]!r} is absent (relative to {str(workdir)!r}){prepare_hint(missing[0])}"
        )
    for combination in itertools.product(*axes) if axes else [()]:
        cell_labels = {level.label: level.value for level in combination}
        cell_configs = configs + tuple(path for level in combination for path in level.configs)
        cell_overrides = dict(overrides)
        for level in combination:
            cell_overrides.update(level.overrides)
        skip = False
        for rule in rules:
            if all(cell_labels.get(label) in values for label, values in rule["where"].items()):
                cell_overrides.update(rule["overrides"])
                skip = skip or rule["skip"]
        if not skip:
            study.cells.append(
                Cell(
                    study=name,
                    labels=cell_labels,
                    configs=cell_configs,
                    overrides=cell_overrides,
                    test=test,
                    index=start + len(study.cells),
                    root=base,
                    command=command,
                )
            )
    return study


def _axis(key: str, values: Any, base: Path, where: str) -> list[_Level]:
    if isinstance(values, dict):  # a named axis: level name -> bundle of configs and overrides
        if not values:
            raise UserError(f"{where}: a named axis needs at least one level")
        levels = []
        for level, bundle in values.items():
            bundle = mapping_of(bundle if bundle is not None else {}, f"{where}.{level}")
            check_keys(bundle, LEVEL_KEYS, f"{where}.{level}")
            levels.append(
                _Level(
                    label=key,
                    value=format_value(level),
                    configs=_configs(bundle.get("configs", []), base, f"{where}.{level}"),
                    overrides=tuple(_overrides(bundle.get("overrides", {}), f"{where}.{level}").items()),
                )
            )
        return levels
    if not isinstance(values, list) or not values:
        raise UserError(f"{where}: expected a non-empty list of values (or a mapping of named levels), got {values!r}")
    return [_Level(label=axis_label(key), value=format_value(value), overrides=((key, value),)) for value in values]


def _rule(rule: Any, labels: list[str], where: str) -> dict[str, Any]:
    rule = mapping_of(rule, where)
    check_keys(rule, RULE_KEYS, where)
    condition = mapping_of(rule.get("where", {}), f"{where}.where")
    for label in condition:
        if label not in labels:
            raise UserError(
                f"{where}.where: unknown axis label {label!r}; the grid's labels are {', '.join(labels) or 'none'}"
            )
    values = {
        label: {format_value(v) for v in (wanted if isinstance(wanted, list) else [wanted])}
        for label, wanted in condition.items()
    }
    skip = rule.get("skip", False)
    if not isinstance(skip, bool):
        raise UserError(f"{where}.skip must be true or false, got {skip!r}")
    return {"where": values, "overrides": _overrides(rule.get("overrides", {}), where), "skip": skip}


# --------------------------------------------------------------------------- chained studies


def _chain(raw: Any, where: str) -> Chain:
    raw = mapping_of(raw, where)
    check_keys(raw, CHAIN_KEYS, where)
    match = raw.get("match") or []
    if not isinstance(match, list) or not all(isinstance(label, str) for label in match):
        raise UserError(f"{where}: match must be a list of axis labels, got {match!r}")
    labels = {
        str(label): format_value(value) for label, value in mapping_of(raw.get("labels"), f"{where}: labels").items()
    }
    return Chain(study=str(raw.get("study")), match=tuple(match), labels=labels)


def _link(study: Study, chain: Chain, studies: list[Study], where: str) -> None:
    """Give each of ``study``'s cells its one upstream cell, of an unchained study of the file."""
    upstream = next((other for other in studies if other.name == chain.study and other.chain is None), None)
    if upstream is None:
        unchained = ", ".join(other.name for other in studies if other.chain is None)
        raise UserError(f"{where}: study {chain.study!r} is not an unchained study of this file: {unchained}")
    for label in chain.match:
        for side in (study, upstream):
            if label not in side.labels:
                raise UserError(
                    f"{where}: match label {label!r} is not an axis of study {side.name!r}; "
                    f"its labels are {', '.join(side.labels) or 'none'}"
                )
    linked = []
    for cell in study.cells:
        if CHAIN_KEY in cell.overrides:
            raise UserError(f"{where}: cell {cell.id!r} sets {CHAIN_KEY}, which it takes from study {upstream.name!r}")
        wanted = {**{label: cell.labels[label] for label in chain.match}, **chain.labels}
        found = [other for other in upstream.cells if all(other.labels.get(k) == v for k, v in wanted.items())]
        described = ", ".join(f"{label}={value}" for label, value in wanted.items()) or "any labels"
        if len(found) != 1:
            raise UserError(
                f"{where}: {len(found)} cells of study {upstream.name!r} have {described} (for cell "
                f"{cell.id!r}); match and labels must pick exactly one"
            )
        linked.append(replace(cell, upstream=found[0]))
    study.cells = linked


# --------------------------------------------------------------------------- small checks


def _overrides(value: Any, where: str) -> dict[str, Any]:
    # a key the command line does not take is refused when the cells are validated, by the CLI's parser
    return dict(mapping_of(value, f"{where}: overrides"))


def _configs(value: Any, base: Path, where: str) -> tuple[Path, ...]:
    entries = value if isinstance(value, list) else [value]
    paths = []
    for entry in entries:
        if not isinstance(entry, str):
            raise UserError(f"{where}: configs must be paths, got {entry!r}")
        # A config the sweep file's folder does not have may be a shipped one (configs/tied.yaml).
        path = (base / Path(resolve_config(entry, relative_to=base)).expanduser()).resolve()
        if not path.is_file():
            raise UserError(f"{where}: config {entry!r} does not exist (looked for {str(path)!r})")
        paths.append(path)
    return tuple(paths)


def _wandb_settings(value: Any, where: str) -> dict[str, Any] | None:
    if value is False:
        return None
    settings = mapping_of(value, f"{where}: wandb")
    check_keys(settings, WANDB_KEYS, f"{where}: wandb")
    return {"project": "tiedemb", **settings}


def _threads(value: Any, where: str) -> int | None:
    """``threads``: a positive whole number of CPU threads for each cell's process, or unset."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{where}: threads must be a positive whole number, got {value!r}")
    return value
