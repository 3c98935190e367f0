"""A small openb-format trace for simulator tests."""

from __future__ import annotations

import io

from gpudra.simulate.trace import Trace, TraceNode, read_nodes, read_tasks


NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
n-0,32000,131072,2,T4
n-1,64000,262144,4,G2
n-2,96000,393216,8,G2
n-3,16000,65536,0,
n-4,32000,131072,1,P100
"""


PODS_CSV = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p-0,4000,8192,1,500,,LS,Running,0,100,0
p-1,2000,4096,1,250,T4,LS,Running,10,50,10
p-2,8000,16384,2,1000,,LS,Running,20,200,20
p-3,1000,2048,0,0,,BE,Running,30,40,30
p-4,4000,8192,1,1000,G2|P100,LS,Running,40,400,40
p-5,6000,8192,1,330,,LS,Running,50,60,50
p-6,16000,32768,4,1000,,LS,Running,60,70,60
"""


def small_trace(copies: int = 6) -> Trace:
    """The nodes above, `copies` times over (90 GPUs: arrived demand passes every percent near 100)."""
    nodes = [TraceNode(f"{n.name}-{c}", n.cpu_milli, n.memory_mib, n.gpus, n.model)
             for c in range(copies) for n in read_nodes(io.StringIO(NODES_CSV))]
    return Trace("small", nodes, read_tasks(io.StringIO(PODS_CSV)))
