"""``python -m tiedemb.dashboard --entity E --project P``: the studies' comparison views, saved to W&B.

Two W&B workspace views of the project's runs (``tiedemb.experiments.dashboard``): the tied
embeddings study (validation loss by head with seed bands, measured against predicted initial
loss, steps to each target, the self-logit margin) and the embedding width study (loss and dev
scores against d_e). ``--dry-run`` prints the panels as JSON and needs neither a network nor
wandb-workspaces. Saving needs W&B credentials, a server that answers and the ``dashboard``
extra (``pip install 'tiedemb[dashboard]'``); without them: one line, exit 2, nothing saved.
"""

from __future__ import annotations

import json
import sys

from tiedemb.errors import UserError, first_line
from tiedemb.training.exits import CommandParser, report_user_errors


def parser() -> CommandParser:
    parser = CommandParser(prog="tiedemb dashboard", description=__doc__.split("\n\n")[0])
    parser.add_argument("--entity", help="the W&B entity (user or team) that owns the project")
    parser.add_argument("--project", help="the W&B project the runs log to (runs' default: tiedemb)")
    parser.add_argument("--dry-run", action="store_true", help="print the panels as JSON; save nothing, no network")
    return parser


def save_views(entity: str, project: str) -> list[str]:
    """Build every view, then save them; the views' URLs. Where W&B cannot be reached, refused with nothing saved."""
    from tiedemb.experiments.dashboard import build_workspaces, views
    from tiedemb.training.wandb_mode import has_credentials, server_problem

    workspaces = build_workspaces(views(), entity, project)  # all of them whole, or none: nothing saved yet
    if not has_credentials():
        raise UserError("saving W&B views needs W&B credentials: run `wandb login` or set WANDB_API_KEY")
    problem = server_problem()
    if problem is not None:
        raise UserError(f"{problem}: no view saved; try again when it answers, or print them with --dry-run")
    saved = []
    for workspace in workspaces:
        try:
            saved.append(workspace.save().url)
        except Exception as error:  # W&B's client raises its own errors and requests' for a failed save
            done = f" (saved before it: {', '.join(saved)})" if saved else " (no view saved)"
            raise UserError(f"saving the W&B view {workspace.name!r} failed: {first_line(error)}{done}") from error
    return saved


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.dry_run:
        from tiedemb.experiments.dashboard import as_json, views

        print(json.dumps(as_json(views()), indent=2))
        return 0
    missing = [option for option, value in (("--entity", args.entity), ("--project", args.project)) if not value]
    if missing:
        parser().error(f"{' and '.join(missing)} required to save the views (or --dry-run to print them)")
    urls = report_user_errors(lambda: save_views(args.entity, args.project))
    if isinstance(urls, int):  # the exit status of a user error, already reported
        return urls
    for url in urls:
        print(f"saved {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
