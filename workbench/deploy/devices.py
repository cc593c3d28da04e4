"""Which Neuron devices hold a core range, at the instance's logical NeuronCore config (LNC).

Core ids are logical: on Trn2 each chip has 8 physical NeuronCores, presented as 4 at LNC=2 (the
default) or 8 at LNC=1; LNC exists only on Trn2 and later (SDK-lnc). The container guide passes
``--device /dev/neuronN`` for each device and keeps core ids global inside the container
(SDK-ctr), so the device for logical core c is ``c // cores_per_device(lnc)``. The per-family
counts at the default LNC, the families with an LNC and its default live in `workbench.system`;
this module only scales them.
"""

from __future__ import annotations

from workbench.coremap import CoreRange, CoreRangeError
from workbench.system import DEFAULT_LNC, LNC_VALUES, cores_for_instance, cores_per_device, instance_family

__all__ = ["DEFAULT_LNC", "is_cpu", "family_of", "lnc_of", "cores_per_device_at", "instance_cores_at", "neuron_devices"]


def is_cpu(instance_type: str | None) -> bool:
    return instance_type is not None and instance_type.strip().lower() == "cpu"


# The target an instance type (or family) belongs to: ``trn1n.32xlarge`` -> ``trn1``,
# ``trn2u.48xlarge`` -> ``trn2``; the rule lives in `workbench.system`.
family_of = instance_family


def lnc_of(instance_type: str | None, lnc: int | None = None) -> int | None:
    """The LNC the runtime uses on ``instance_type``: ``lnc`` checked, or the family's default; None
    for families without one (Inf1, Inf2, Trn1) or no instance type."""
    if lnc is not None and (isinstance(lnc, bool) or lnc not in LNC_VALUES):
        raise ValueError(f"lnc must be 1 or 2 (the only logical NeuronCore configs), got {lnc!r}")
    family = family_of(instance_type) if instance_type else None
    if family not in DEFAULT_LNC:
        if lnc is not None:
            where = instance_type or "an unnamed instance type"
            raise ValueError(f"lnc={lnc} applies only to Trn2/Trn3 instances, not {where}")
        return None
    return DEFAULT_LNC[family] if lnc is None else lnc


def cores_per_device_at(instance_type: str, lnc: int | None = None) -> int:
    """Logical NeuronCores per device: the family's count at its default LNC, scaled to ``lnc``."""
    per_device = cores_per_device(instance_type)
    effective = lnc_of(instance_type, lnc)
    if effective is None:
        return per_device
    return per_device * DEFAULT_LNC[family_of(instance_type)] // effective


def instance_cores_at(instance_type: str, lnc: int | None = None) -> int | None:
    """Logical NeuronCores of an instance type at ``lnc``; None when the type is not in the table."""
    total = cores_for_instance(instance_type)
    if total is None:
        return None
    return total // cores_per_device(instance_type) * cores_per_device_at(instance_type, lnc)


def _per_device(instance_type: str | None, given: int | None, lnc: int | None) -> int:
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise ValueError(f"cores_per_device must be a positive integer, got {given!r}")
        if instance_type is not None and given != cores_per_device_at(instance_type, lnc):
            raise ValueError(
                f"cores_per_device={given} contradicts {instance_type} "
                f"({cores_per_device_at(instance_type, lnc)} per device); give one of them"
            )
        return given
    if instance_type is None:
        raise ValueError("give instance_type (e.g. 'inf2.24xlarge') or cores_per_device")
    return cores_per_device_at(instance_type, lnc)


def neuron_devices(
    core_range: CoreRange,
    *,
    instance_type: str | None = None,
    cores_per_device: int | None = None,
    lnc: int | None = None,
) -> list[int]:
    """Indices N of the ``/dev/neuronN`` devices holding cores ``a:b`` (inclusive); none for
    ``instance_type="cpu"``."""
    cores = core_range
    if is_cpu(instance_type):
        return []
    per_device = _per_device(instance_type, cores_per_device, lnc)
    if instance_type is not None and "." in instance_type:
        total = instance_cores_at(instance_type, lnc)
        if total is not None and cores.end >= total:
            at = f" at LNC={lnc_of(instance_type, lnc)}" if lnc_of(instance_type, lnc) else ""
            raise CoreRangeError(
                f"core range {cores} needs core {cores.end}, but {instance_type} has cores 0..{total - 1}{at}"
            )
    return list(range(cores.start // per_device, cores.end // per_device + 1))
