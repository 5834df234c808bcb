"""Lightning's rich model summary without its FLOPs column when it counted none.

Lightning (2.5 on) counts a model's FLOPs for its summary by running ``example_input_array``
through it; tiedemb's modules set none (a forward pass at every start would cost more than the
line is worth), so the summary shows a column of zeros and "Total FLOPs: 0", which reads as a
fact about the model. ``SummaryWithoutFlops`` leaves both out when the count is 0; tiedemb logs
its own model FLOPs per second during training (``tiedemb.modules.throughput``).
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import RichModelSummary
from lightning.pytorch.utilities.model_summary import get_formatted_model_size, get_human_readable_count

FLOPS = "FLOPs"


class SummaryWithoutFlops(RichModelSummary):
    """``RichModelSummary``, its FLOPs column and total left out when they are 0 (see the module)."""

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        if total_flops:
            RichModelSummary.summarize(
                summary_data,
                total_parameters,
                trainable_parameters,
                model_size,
                total_training_modes,
                total_flops=total_flops,
                **summarize_kwargs,
            )
            return
        from rich import get_console
        from rich.table import Table

        columns = [(name, values) for name, values in summary_data if name != FLOPS]
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        table.add_column(" ", style="dim")
        for name, _ in columns[1:]:
            table.add_column(
                name, justify="left" if name in ("Name", "Type", "Mode") else "right", no_wrap=name == "Name"
            )
        for row in zip(*(values for _, values in columns)):
            table.add_row(*row)
        console = get_console()
        console.print(table)
        grid = Table.grid(expand=True)
        grid.add_column()
        for label, value in (
            ("Trainable params", get_human_readable_count(int(trainable_parameters))),
            ("Non-trainable params", get_human_readable_count(int(total_parameters - trainable_parameters))),
            ("Total params", get_human_readable_count(int(total_parameters))),
            ("Total estimated model params size (MB)", get_formatted_model_size(model_size)),
            ("Modules in train mode", total_training_modes.get("train", 0)),
            ("Modules in eval mode", total_training_modes.get("eval", 0)),
        ):
            grid.add_row(f"[bold]{label}[/]: {value}")
        console.print(grid)
