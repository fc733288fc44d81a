//go:build !linux

package ads

// Huge page advice is Linux's: elsewhere the bootstrap heap only holds the
// collector back.
func thpMode() string { return "" }

func madviseRange(uintptr, uintptr, bool) error { return nil }
