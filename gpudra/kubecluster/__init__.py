"""The real Kubernetes control plane, built from Go modules, with gpudra's simulated GPU nodes joined to it.

`build` compiles the repository's Go module `k8s/` (etcd, kube-apiserver, kube-controller-manager, kube-scheduler
and kubectl of one release in one binary) into a cache outside the checkout and reuses it; `controlplane` starts
those components on loopback with TLS and the release's DRA feature gates and writes a kubeconfig; `kubelet` is the
node stand-in (KWOK's manner: Node objects, leases, pods turned Running) that prepares claims through each node's
real driver over the kubelet plugin gRPC API.
"""
