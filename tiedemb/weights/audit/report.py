"""An audit in words: what the architecture does, the numbers, the verdict, the remedies."""

from __future__ import annotations

from tiedemb.weights.audit.remedies import REMEDIES
from tiedemb.weights.audit.run import COPYING, FAR_ABOVE, SMALL_RATIO, Audit


def _scales(audit: Audit) -> str:
    arch = audit.arch
    parts = [f"table std {arch.token_std:g}"]
    if arch.input_scale != 1.0:
        parts.append(f"input scale {arch.input_scale:.4g} (√{arch.hidden_size})")
    if arch.family.positions:
        parts.append("learned positions" + (" and segments" if arch.family.segments else "") + " added")
    parts.append(f"final norm {arch.final_norm}" + (f" with gain {arch.norm_gain:g}" if arch.norm_gain != 1.0 else ""))
    if arch.family.head_transform:
        parts.append("dense → GELU → LayerNorm before the table")
    if arch.output_scale != 1.0:
        parts.append(f"output scale {arch.output_scale:.4g} (d^-½)")
    parts.append(f"soft-cap {arch.softcap:g}" if arch.softcap else "no soft-cap")
    return "; ".join(parts)


def verdict(audit: Audit) -> str:
    above = audit.measured - audit.log_n
    copies = f"the token read is the top prediction at {audit.copy_rate:.0%} of positions"
    if audit.two_gram:
        return f"starts as a tied 2-gram model: {above:.2f} nats above ln n; {copies}"
    if above < FAR_ABOVE and audit.copy_rate >= COPYING:
        return f"starts near ln n ({above:+.2f} nats): {copies}, but by a lead too small to lift the loss far"
    if above < FAR_ABOVE:
        return f"starts near ln n ({above:+.2f} nats), not as a tied 2-gram model; {copies}"
    return f"starts {above:.2f} nats above ln n, but not as a tied 2-gram model; {copies}"


def theory_line(audit: Audit) -> str:
    near, counted = audit.predicted.loss, audit.predicted_with_branches.loss
    error = (near - audit.measured) / audit.measured
    if audit.near_identity:
        return (
            f"applies: the branches' output is {audit.branch_ratio:.2f}x the embedding (near identity, "
            f"at most {SMALL_RATIO}); predicted {near:.2f} against measured {audit.measured:.2f} ({error:+.1%})"
        )
    return (
        f"does not apply: the branches' output is {audit.branch_ratio:.2f}x the embedding, not near identity "
        f"(above {SMALL_RATIO}), so the stream at the head is not the token's vector; counting the branches as "
        f"noise unrelated to the token predicts {counted:.2f} (measured {audit.measured:.2f})"
    )


def lines(audit: Audit) -> list[str]:
    arch = audit.arch
    tie = "tied" if arch.tied else "untied"
    width = f", table width {arch.table_width}" if arch.table_width != arch.hidden_size else ""
    out = [
        f"architecture     {arch.model_type} ({arch.class_name}, {arch.family.label}): {arch.layers} layers, hidden "
        f"{arch.hidden_size}{width}, vocabulary {arch.vocab_size}, {tie}, {arch.parameters / 1e6:.1f}M parameters",
        f"embedding/output {_scales(audit)}",
        f"tokens           {audit.tokens}",
        f"residual ratio   {audit.branch_ratio:.3f}  (|branches' output| / |embedding| at initialisation)",
        f"predicted        {audit.predicted.loss:.2f} nats (near identity); "
        f"{audit.predicted_with_branches.loss:.2f} with the measured branches",
        f"measured         {audit.measured:.2f} nats",
        f"ln n             {audit.log_n:.2f} nats",
        f"verdict          {verdict(audit)}",
        f"theory           {theory_line(audit)}",
    ]
    if audit.remedies:
        out.append("remedies         predicted (near identity / with branches), measured, residual ratio:")
        for result in audit.remedies:
            label = f"  {result.name:<12} {REMEDIES[result.name]}"
            if result.not_applicable:
                out.append(f"{label}: not applicable, {result.not_applicable}")
            else:
                out.append(
                    f"{label}: {result.predicted:.2f} / {result.predicted_with_branches:.2f}, "
                    f"measured {result.measured:.2f}, ratio {result.branch_ratio:.3f}"
                )
    return out
