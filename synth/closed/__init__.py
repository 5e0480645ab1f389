"""Closed stacks: composed vendor-primitive programs for Trainium (torch-neuronx) and TPU (JAX).

On a closed collective runtime no schedule IR is accepted; what a program controls is which vendor
collectives it calls, on which replica groups, over which tensor shapes, with which transforms
between them, and how many calls it makes (OverlayCCL's strategy layer). This package:

* :mod:`.mesh`: named mesh axes from the topology's hierarchy (node, torus row/col, core; TPU ICI
  axes) and the replica groups they define; ``tpu_v5e`` builds a TPU v5e slice;
* :mod:`.ir`: the program IR (vendor calls on replica groups + tensor transforms);
* :mod:`.strategies`: the strategy space (flat, hierarchical in every order, torus decompositions,
  RS→AR→AG, ring permutes, bundling, pipelining); :mod:`.lower`: synthesized schedules as permutes;
* :mod:`.constraints`: what Neuron and XLA accept; :mod:`.cost`: the calibrated cost model, with
  :mod:`.neuron` pricing Neuron's own calls on Trainium; :mod:`synth.calibrate.closed_fit` fits it
  from nccom-test output or a timing JSON;
* :mod:`.emit`: torch-neuronx (``xm``) and JAX (``shard_map`` + ``jax.lax``) modules;
* :mod:`.reference` and :mod:`.standin`: NumPy semantics of every primitive and stand-ins for
  ``xm``/``torch`` and ``jax.lax`` that run the emitted modules unchanged;
* :mod:`.search`: ranking (``synth strategies``); :mod:`.winner`: :func:`emit_closed_program`, the
  winner proven on the stand-in and written as a module.
"""

from .mesh import Mesh, mesh_for_topology, resolve_topology, tpu_v5e
from .search import Ranking, rank_strategies
from .winner import emit_closed_program

__all__ = ["Mesh", "Ranking", "emit_closed_program", "mesh_for_topology", "rank_strategies",
           "resolve_topology", "tpu_v5e"]
