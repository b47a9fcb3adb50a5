"""DP-FedCT's label mechanisms: one small strategy per ``--mechanism``, one module each.

How to add a mechanism
----------------------
1. Write a module here with a subclass of :class:`~.base.LabelMechanism` that sets ``name``
   and ``summary`` and implements the client side (``own_noise``: the noise the client's
   own options calibrate; ``client_noise``: the message's parameters checked against it,
   refusing less noise; :meth:`~.base.LabelMechanism.release`: train, then return the
   reply made with that noise) and the server side (``calibrate`` before round 1,
   ``round_config`` per round, ``collect``: the consensus from the replies, appending one
   privacy event per release to ``server.events``; ``privacy``: the result's guarantee).
2. Add its name to ``MECHANISMS`` in :mod:`fedlabels.methods.fedct.dp_fedct_options` (and its
   options there, checked in ``DPFedCTOptions.check``) and register the class in
   ``_REGISTRY`` below.
3. Declare its reply payloads in ``DPFedCT.threat_model`` (``dp_fedct.py``).
"""

from __future__ import annotations

from fedlabels.core.errors import FedLabelsError
from fedlabels.methods.fedct.mechanisms.base import LabelMechanism
from fedlabels.methods.fedct.mechanisms.dpsgd import DPSGDMechanism
from fedlabels.methods.fedct.mechanisms.randomized_response import (
    KaryMechanism,
    XorMechanism,
)
from fedlabels.methods.fedct.mechanisms.subsample_aggregate import (
    SubsampleAggregateMechanism,
)

_REGISTRY: dict[str, type[LabelMechanism]] = {
    cls.name: cls for cls in (XorMechanism, KaryMechanism, DPSGDMechanism,
                              SubsampleAggregateMechanism)}


def mechanism_for(name: str) -> LabelMechanism:
    """The strategy of mechanism ``name``."""
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise FedLabelsError(f"unknown DP-FedCT mechanism {name!r}; use one of "
                             f"{', '.join(_REGISTRY)}.") from None


__all__ = ["LabelMechanism", "mechanism_for"]
