// Command kubectl is the upstream kubectl of the same release as the
// kube-apiserver, built from the k8s.io/kubectl module.
package main

import (
	"os"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // exec/oidc auth plugins, as upstream
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// Set -v before the command is built, as upstream does, so that klog is
	// configured while plugins and .kuberc are being handled.
	_, _ = logs.GlogSetter(cmd.GetLogVerbosity(os.Args))
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
