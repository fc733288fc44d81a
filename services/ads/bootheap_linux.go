package ads

import (
	"os"

	"golang.org/x/sys/unix"
)

// thpMode reads the kernel's transparent huge page mode: the bracketed word
// of /sys/kernel/mm/transparent_hugepage/enabled, or "" without one.
func thpMode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return ""
	}
	return parseTHPMode(string(b))
}

// madviseRange advises [addr, addr+n) MADV_HUGEPAGE (huge) or
// MADV_NOHUGEPAGE. The range is the Go heap's, which stays mapped.
func madviseRange(addr, n uintptr, huge bool) error {
	advice := unix.MADV_NOHUGEPAGE
	if huge {
		advice = unix.MADV_HUGEPAGE
	}
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, addr, n, uintptr(advice)); errno != 0 {
		return errno
	}
	return nil
}
