"""What the gpu probe tests run on real ranks (module level: spawn pickles it by name)."""

from ddpdoctor.check.probes import gpu, topology


def gpu_and_topology(ctx):
    return {"gpu": gpu.collect(ctx, {}), "topology": topology.collect(ctx, {})}
