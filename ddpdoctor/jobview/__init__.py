"""One view of a job that spans many nodes, over the job's own TCPStore.

Every ``ddpdoctor run`` of one job (one per node) publishes what its node sees under one
key prefix in the store torchrun already serves (keys.py); one leader (the node that hosts
the store) decides (leader.py, pure), asks every node for its ranks' stacks, merges them
(merge.py) and posts one verdict every node prints. Nothing else crosses the network.
"""
