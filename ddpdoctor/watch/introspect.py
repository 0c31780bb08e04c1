"""What the watch learns about the model and the process once, at attach: the wrapper, the
parameters by their clean names, the data-parallel group, the host. Pure reads."""

from __future__ import annotations

import os
import socket
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ddpdoctor.watch.base import local

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup
    from torch.nn.parallel import DistributedDataParallel

_NAME_NOISE = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def clean_name(name: str) -> str:
    for noise in _NAME_NOISE:
        name = name.replace(noise, "")
    return name


class Groups(Protocol):
    """What is asked of ``torch.distributed`` here (the module, or a test's stand-in)."""

    def get_process_group_ranks(self, group: ProcessGroup) -> list[int]: ...


@dataclass
class ModelFacts:
    model: torch.nn.Module
    ddp: DistributedDataParallel | None
    inner: torch.nn.Module  # the module the user wrote (DDP's .module, else the model)
    wrapper: str        # "ddp", "fsdp1", "fsdp2" or "module"
    named_params: list[tuple[str, torch.nn.Parameter]]
    named_buffers: list[tuple[str, torch.Tensor]]
    param_ids: set[int]
    device: torch.device


def describe(model: torch.nn.Module) -> ModelFacts:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    ddp = model if isinstance(model, DistributedDataParallel) else None
    inner = ddp.module if ddp is not None else model

    params = [(clean_name(n), p) for n, p in inner.named_parameters()]
    buffers = [(clean_name(n), b) for n, b in inner.named_buffers()]
    first = next((p for _, p in params), None)
    device = local(first).device if first is not None else torch.device("cpu")
    return ModelFacts(model, ddp, inner, wrapper_kind(model), params, buffers,
                      {id(p) for _, p in params}, device)


def wrapper_kind(model: object) -> str:
    names = {type(m).__name__ for m in [model]} | {c.__name__ for c in type(model).__mro__}
    if "DistributedDataParallel" in names:
        return "ddp"
    if "FSDPModule" in names:
        return "fsdp2"
    if "FullyShardedDataParallel" in names:
        return "fsdp1"
    return "module"


def host_id() -> int:
    """Ranks with the same id share a host and a network namespace (their links are
    loopback). A hostname alone is not enough: containers and namespaces share one."""
    try:
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        netns = 0
    return zlib.crc32(f"{socket.gethostname()}/{netns}".encode())


def env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _fsdp2_ranks(model: torch.nn.Module, dist: Groups) -> list[int] | None:
    for m in model.modules():
        get_state = getattr(m, "_get_fsdp_state", None)
        if get_state is None:
            continue
        pgroup = getattr(get_state(), "_fsdp_param_group", None)
        if pgroup is None:
            continue
        info = pgroup.mesh_info
        ranks = set(dist.get_process_group_ranks(info.shard_process_group))
        rep = getattr(info, "replicate_process_group", None)
        if rep is not None:
            ranks |= set(dist.get_process_group_ranks(rep))
        return sorted(ranks)
    return None


def dp_ranks(model: torch.nn.Module, ddp: DistributedDataParallel | None, dist: Groups,
             world: int) -> list[int]:
    """Global ranks of this rank's data-parallel group (the world when unknown)."""
    try:
        if ddp is not None and getattr(ddp, "process_group", None) is not None:
            return list(dist.get_process_group_ranks(ddp.process_group))
        ranks = _fsdp2_ranks(model, dist)
        if ranks is not None:
            return ranks
    except Exception:  # private attributes move between releases
        pass
    return list(range(world))


def solo_group(model: torch.nn.Module, ddp: DistributedDataParallel | None) -> str:
    """Words for a data-parallel group of one rank: the mesh or process group it is."""
    if ddp is not None:
        return "DDP's process group holds only its own rank"
    for _, p in model.named_parameters():
        mesh = getattr(p, "device_mesh", None)
        if mesh is None:
            continue
        try:
            names, shape = mesh.mesh_dim_names, tuple(mesh.shape)
        except Exception:
            break
        dims = ", ".join(f"'{n}'={s}" for n, s in zip(names or (), shape)) or str(shape)
        return f"the parameters' DeviceMesh ({dims}) spans only its own rank"
    return "the data-parallel group holds only its own rank"
