// Command kube is the Kubernetes control plane in one binary, built from the release's Go modules:
//
//	kube etcd ...                     etcd (go.etcd.io/etcd/server/v3/etcdmain), the version Kubernetes pins
//	kube kube-apiserver ...           k8s.io/kubernetes/cmd/kube-apiserver
//	kube kube-controller-manager ...  k8s.io/kubernetes/cmd/kube-controller-manager
//	kube kube-scheduler ...           k8s.io/kubernetes/cmd/kube-scheduler
//	kube kubectl ...                  k8s.io/kubectl
//	kube pki DIR                      the cluster's certificates and service-account keys (package pki)
//
// One binary rather than five: the components share most of their packages, so one link instead of five, a third
// of the disk, and a faster cold build on a small machine. A symlink named like a component runs that component
// (kubectl -> kube), as the hyperkube image did.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"

	"gpudra.local/k8s/pki"
)

const usage = "usage: kube etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubectl|pki [ARGS...]"

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if name == "kube" || name == "kube.exe" {
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	os.Args = append([]string{name}, args...)
	switch name {
	case "etcd":
		etcdmain.Main(os.Args)
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "kubectl":
		command := kubectlcmd.NewDefaultKubectlCommand()
		if err := cli.RunNoErrOutput(command); err != nil {
			kubectlutil.CheckErr(err)
		}
	case "pki":
		if len(args) != 1 {
			fmt.Fprintln(os.Stderr, "usage: kube pki DIR")
			os.Exit(2)
		}
		if err := pki.Write(args[0]); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "kube: unknown component %q\n%s\n", name, usage)
		os.Exit(2)
	}
}
