package k8stest

import "syscall"

// setDeathSignal makes the kernel SIGKILL the child when the test binary
// dies (a panic, or go test's -timeout), so no etcd or kube-apiserver
// outlives the test run even when t.Cleanup never runs.
func setDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
