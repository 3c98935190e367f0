"""A local DRA cluster on one machine: a store of plain Kubernetes objects in a state directory, one real
`gpudra` driver process per simulated GPU node (kubelet-plugin sockets, checkpoint, CDI specs), and a control loop
(resourceclaim controller, scheduler, binding, a kubelet stand-in that prepares claims over the plugin socket and
applies the CDI devices to each container's OCI spec).

- `layout`: the state directory, node naming, the cluster brought up last
- `store`: the object store (API server semantics the flow needs) and events; `kinds`: the kinds it serves and the
  name rules every path is built from; `apply`: kubectl apply's three-way merge
- `nodes`: Node objects and driver processes (`cluster up/down`); `nodeagent`: one driver process
- `controller`: the control loop; `kubelet`: the kubelet stand-in
- `printers`: kubectl's columns and `describe`; `view`: the HTML page
"""
