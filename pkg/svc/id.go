package svc

import (
	"crypto/rand"
	"encoding/hex"
	"os"
)

// InstanceID is <role>-<hostname>-<8 hex>: unique per process, readable in
// logs, leases and the registry.
func InstanceID(role string) string {
	h, _ := os.Hostname()
	if h == "" {
		h = "host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return role + "-" + h + "-" + hex.EncodeToString(b[:])
}
