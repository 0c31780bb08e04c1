"""Store keys and endpoints: the one definition every node (and ``attach --job``) reads.

torchrun's own keys live under ``torch.rendezvous.``, ``torchelastic/`` and the process
groups' prefixes (``default_pg/``, numbers); ours all start with PREFIX, which none of
them can produce.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.core.contract import JOBVIEW_PREFIX

PREFIX = JOBVIEW_PREFIX
NODE_COUNT = PREFIX + "nodes"  # store.add counter: a node's index is its ticket
REQUEST = PREFIX + "request"  # the leader's (or attach's) latest stack request, JSON
VERDICT = PREFIX + "verdict"  # the leader's latest verdict, JSON
FAIL_COUNT = PREFIX + "failures"  # store.add counter of failure records
LEADER = PREFIX + "leader"  # "host/node": who decides (the store's host claims it first)
JOB = PREFIX + "job"  # the leader's summary: threshold, lost nodes
ATTACH_REQUEST = PREFIX + "attach-request"  # `attach --job`: look, never stop
ATTACH_COUNT = PREFIX + "attach"  # request ids taken by `attach --job` (never collide)

DEFAULT_RDZV_PORT = 29400  # torchrun's default when --rdzv-endpoint has no port
DEFAULT_MASTER_PORT = 29500


def node_key(index: int) -> str:
    return f"{PREFIX}node/{index}"


def reply_key(request_id: str, index: int) -> str:
    return f"{PREFIX}reply/{request_id}/{index}"


def failure_key(index: int) -> str:
    return f"{PREFIX}failure/{index}"


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    source: str  # which flag named it

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_endpoint(text: str, default_port: int = DEFAULT_RDZV_PORT,
                   source: str = "--job-endpoint") -> Endpoint:
    """``HOST:PORT`` / ``[v6]:PORT`` / ``HOST``; ValueError with the reason."""
    text = text.strip()
    host, port = text, str(default_port)
    if text.startswith("["):
        if "]" not in text:
            raise ValueError(f"{source}: {text!r} opens an IPv6 '[' it does not close")
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else port
    elif text.count(":") == 1:
        host, port = text.split(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{source}: {text!r} is not HOST:PORT")
    return Endpoint(host, int(port), source)


_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
_BOOLEAN = frozenset({"--standalone", "--no-python", "--run-path", "--module"})


def _flag_values(args: list[str]) -> dict[str, str]:
    """``--flag value`` and ``--flag=value`` of the launcher, up to its script/module."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-m" or not a.startswith("-"):
            break  # the training script and its own arguments: not the launcher's
        name, eq, value = a.partition("=")
        name = name.replace("_", "-")
        if (not eq and name not in _BOOLEAN and i + 1 < len(args)
                and not args[i + 1].startswith("-")):
            value = args[i + 1]
            i += 1
        out[name] = value
        i += 1
    return out


def endpoint_from_command(cmd: list[str]) -> Endpoint | None:
    """The job's store as its torchrun command names it; None when it names none."""
    start = next((i for i, a in enumerate(cmd)
                  if a.rsplit("/", 1)[-1] in _LAUNCHERS), None)
    if start is None:
        return None
    flags = _flag_values(cmd[start + 1:])
    if flags.get("--rdzv-endpoint") and flags.get("--rdzv-backend", "c10d") == "c10d":
        return parse_endpoint(flags["--rdzv-endpoint"], DEFAULT_RDZV_PORT, "--rdzv-endpoint")
    if flags.get("--master-addr") and flags.get("--nnodes", "1") not in ("1", "1:1"):
        port = flags.get("--master-port") or str(DEFAULT_MASTER_PORT)
        return parse_endpoint(f"{flags['--master-addr']}:{port}", DEFAULT_MASTER_PORT,
                              "--master-addr/--master-port")
    return None
