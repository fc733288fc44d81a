//go:build !linux

package k8stest

import "syscall"

// setDeathSignal is a no-op where the kernel has no parent-death signal;
// t.Cleanup still stops the children.
func setDeathSignal(*syscall.SysProcAttr) {}
