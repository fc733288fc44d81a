package spiffe

import "testing"

func TestID(t *testing.T) {
	if got, want := ID(DefaultTrustDomain, "shop", "web"), "spiffe://cluster.local/ns/shop/sa/web"; got != want {
		t.Errorf("ID = %q, want %q", got, want)
	}
}
