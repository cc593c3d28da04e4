"""Beyond one machine on Ray: a sweep's variants measured as Ray tasks on a cluster's nodes
(`ray_sweep.run_sweep_on_ray`) and compiles fanned out as Ray tasks (`farm.compile_on_ray`).

Ray is optional: only the modules here import it, and only when one of their calls runs, so the
workbench imports (and its other sweeps run) without Ray installed.
"""

from workbench.measure.cluster.ray_sweep import run_sweep_on_ray
from workbench.measure.cluster.ray_task import RAY_MISSING

__all__ = ["RAY_MISSING", "run_sweep_on_ray"]
