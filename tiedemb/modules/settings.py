"""The model settings in a LightningModule's signature, made from ``TransformerConfig``'s fields.

Users type the model's settings flat (``--model.hidden_size``, ``model.init_args.hidden_size`` in
YAML), and both modules take them. Rather than spell each field out again in every ``__init__``,
``takes_model_settings`` gives an ``__init__`` the signature it would have if it had: one keyword
per field of the chosen parts, with the field's type, default and description, followed by the
module's own keywords. Every argument of a call is checked against its annotation, bounds
included (``tiedemb.options``), before the body runs. LightningCLI builds its options and
``--help`` from that signature (``inspect.signature`` honours ``__signature__``; jsonargparse
reads the descriptions from the ``Args:`` of ``__init__``'s docstring), and Lightning's ``load_from_checkpoint``
calls the class with the saved hyperparameters, checked against the same signature. A field added to
``TransformerConfig`` is therefore an option of every module that takes its part. A field with a
fixed set of names is a ``Literal`` there, so ``--help`` and shell completion list its choices;
``model.head`` is open to any registered head, so its ``Literal`` is made here, from
``tiedemb.nn.heads.HEADS`` as it stands when the module class is defined (what the command line
offers); a call from Python may name a head registered later, which the registry checks.

Why not jsonargparse's public ways of declaring settings once:

- A ``TransformerConfig`` argument (jsonargparse's dataclass support) nests its fields under the
  argument's name: ``model.init_args.config.hidden_size``. Every shipped config, sweep file and
  checkpoint's hyperparameters name them flat, so that would change what every one of them means.
- Explicit keyword arguments would write the 33 fields, their types, defaults and descriptions out
  again in each module (with the pretrained-source variants' ``None`` defaults), a second and third
  copy of ``nn/config.py`` to keep in step by hand.

Lightning records hyperparameters by reading the named arguments of the ``__init__`` frame that
calls ``save_hyperparameters``, which a generated signature does not have as local variables.
``save_settings`` records them from the call instead, handed over by the decorator in a context
variable (the call's arguments, visible to that call alone, nested constructions included); an
``__init__`` using it must initialise with ``L.LightningModule.__init__(self)``, not
``super().__init__()``: ``super()`` is what makes Lightning inspect the frame, whose locals lack
the generated signature's names.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Collection, Mapping
from contextvars import ContextVar
from typing import Any, Literal

import lightning as L

from tiedemb.nn.config import TransformerConfig
from tiedemb.nn.heads import HEADS
from tiedemb.options import check_arguments

_ARGUMENTS: ContextVar[dict[str, Any] | None] = ContextVar("tiedemb_module_arguments", default=None)
"""The bound arguments of the ``__init__`` call in progress (all of them, defaults included)."""


def model_parameters(parts: Collection[str], unset_from_pretrained: Collection[str] = ()) -> list[inspect.Parameter]:
    """One keyword-only parameter per ``TransformerConfig`` field of ``parts``, in field order.

    Fields of the parts in ``unset_from_pretrained``, and fields it names, default to ``None`` (their
    type widened to allow it): the module takes an unset one from its pretrained weights.
    """
    types = typing.get_type_hints(TransformerConfig, include_extras=True)  # bounds included (tiedemb.options)
    parameters = []
    for field in dataclasses.fields(TransformerConfig):
        part = field.metadata["part"]
        if part not in parts:
            continue
        annotation, default = types[field.name], field.default
        if field.name == "head":  # the config takes any registered head; the parser lists those there are
            annotation = Literal[tuple(HEADS)]
        if part in unset_from_pretrained or field.name in unset_from_pretrained:
            annotation, default = annotation | None, None
        parameters.append(
            inspect.Parameter(
                field.name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=annotation,
                default=inspect.Parameter.empty if default is dataclasses.MISSING else default,
            )
        )
    return parameters


def model_settings_doc(
    parts: Collection[str], unset_from_pretrained: Collection[str] = (), documented: Mapping[str, str] | None = None
) -> str:
    """An ``Args:`` docstring section describing the fields of ``parts`` (what ``--help`` shows),
    then the module's own keywords that ``documented`` describes."""
    lines = ["Model settings, the fields of ``tiedemb.nn.config.TransformerConfig``.", "", "Args:"]
    for field in dataclasses.fields(TransformerConfig):
        part = field.metadata["part"]
        if part not in parts:
            continue
        doc = field.metadata["doc"]
        if part in unset_from_pretrained or field.name in unset_from_pretrained:
            default = "hidden_size" if field.name == "embedding_dim" else repr(field.default)
            doc += (
                f" Unset: the pretrained model's value, else {default}."
                if field.default is not dataclasses.MISSING
                else " Unset: the pretrained model's value."
            )
        lines.append(f"    {field.name}: {doc}")
    lines += [f"    {name}: {doc}" for name, doc in (documented or {}).items()]
    return "\n".join(lines) + "\n"


def takes_model_settings(
    *parts: str, unset_from_pretrained: Collection[str] = (), documented: Mapping[str, str] | None = None
) -> Callable[[Callable], Callable]:
    """Decorate ``__init__(self, *, own keywords..., **model)`` to take the model settings of ``parts``.

    ``documented``: descriptions of own keywords shared with other modules (the optimisation
    settings), which join the model settings' in the docstring ``--help`` reads.

    The decorated ``__init__`` has the signature ``(self, *, <model settings>, <own keywords>)``;
    a call is checked against it (an unknown or missing keyword is a ``TypeError``, as for any
    function) and reaches the body with every model setting filled in ``model``.
    """

    def decorate(init: Callable) -> Callable:
        own = list(inspect.signature(init).parameters.values())
        if own[-1].kind is not inspect.Parameter.VAR_KEYWORD:
            raise TypeError(f"{init.__qualname__} must end with **model to take the model settings")
        own_types = typing.get_type_hints(init, include_extras=True)
        own_keywords = [
            parameter.replace(annotation=own_types.get(parameter.name, parameter.annotation)) for parameter in own[1:-1]
        ]
        model = model_parameters(parts, unset_from_pretrained)
        signature = inspect.Signature([own[0], *model, *own_keywords], return_annotation=None)
        # model.head is checked against the registry when the head is built: a head registered after
        # this class was defined (in a user's code, a test) is not in the signature's Literal but is a head.
        option_types = {
            parameter.name: parameter.annotation for parameter in [*model, *own_keywords] if parameter.name != "head"
        }

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            arguments = {name: value for name, value in bound.arguments.items() if name != own[0].name}
            check_arguments("model", option_types, arguments)  # before anything is built or read
            token = _ARGUMENTS.set(arguments)
            try:
                init(self, **arguments)
            finally:
                _ARGUMENTS.reset(token)

        # The function's identity is the decorated one's; no __wrapped__, so that nothing looks past
        # __signature__ to the **model of the body.
        for attribute in ("__module__", "__name__", "__qualname__"):
            setattr(__init__, attribute, getattr(init, attribute))
        __init__.__doc__ = model_settings_doc(parts, unset_from_pretrained, documented) + (init.__doc__ or "")
        __init__.__signature__ = signature  # type: ignore[attr-defined]
        return __init__

    return decorate


def save_settings(module: L.LightningModule) -> None:
    """Record the arguments of the ``__init__`` call in progress as ``module.hparams``.

    Under LightningCLI, Lightning's own record comes first (the configured values and the class
    path the checkpoint reloads with); any setting it lacks, and every setting when the module
    is built directly, is added from the call, defaults included, in signature order.
    """
    arguments = _ARGUMENTS.get()
    if arguments is None:
        raise RuntimeError("save_settings is for an __init__ decorated with takes_model_settings")
    module.save_hyperparameters()  # finds nothing to record outside LightningCLI: see the module docstring
    missing = {name: value for name, value in arguments.items() if name not in module.hparams}
    if missing:
        module.save_hyperparameters({**module.hparams, **missing})
