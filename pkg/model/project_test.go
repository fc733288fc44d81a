package model

import (
	"net/netip"
	"testing"
	"unsafe"
)

func TestCanonicalIP(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "ipv4", in: "10.1.2.3", want: "10.1.2.3"},
		{name: "ipv6 canonical", in: "2001:db8::1", want: "2001:db8::1"},
		{name: "ipv6 upper case", in: "2001:DB8::1", want: "2001:db8::1"},
		{name: "ipv6 long form", in: "2001:0db8:0000:0000:0000:0000:0000:0001", want: "2001:db8::1"},
		{name: "ipv4-mapped ipv6", in: "::ffff:10.1.2.3", want: "::ffff:10.1.2.3"},
		{name: "scoped ipv6", in: "fe80::1%eth0", want: ""},
		{name: "not an address", in: "example.com", want: ""},
		{name: "empty", in: "", want: ""},
		{name: "ipv4 zeros", in: "0.0.0.0", want: "0.0.0.0"},
		{name: "ipv4 highest", in: "255.255.255.255", want: "255.255.255.255"},
		{name: "ipv4 field past 255", in: "10.1.2.256", want: ""},
		{name: "ipv4 leading zero", in: "10.01.2.3", want: ""},
		{name: "ipv4 three fields", in: "10.1.2", want: ""},
		{name: "ipv4 five fields", in: "10.1.2.3.4", want: ""},
		{name: "ipv4 empty field", in: "10..2.3", want: ""},
		{name: "ipv4 trailing dot", in: "10.1.2.3.", want: ""},
		{name: "ipv4 with a port", in: "10.1.2.3:80", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := canonicalIP(tt.in); got != tt.want {
				t.Errorf("canonicalIP(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// An address already in canonical form, the common case, costs no
// allocation: the snapshot build calls this for every endpoint.
func TestCanonicalIPAllocations(t *testing.T) {
	for _, in := range []string{"10.1.2.3", "2001:db8::1"} {
		if n := testing.AllocsPerRun(100, func() { canonicalIP(in) }); n != 0 {
			t.Errorf("canonicalIP(%q): %v allocations, want 0", in, n)
		}
	}
}

// canonicalIPv4, the shortcut past netip for nearly every endpoint's
// address, says yes exactly when netip parses s as IPv4 and writes it back
// unchanged.
func FuzzCanonicalIPv4(f *testing.F) {
	for _, s := range []string{"10.1.2.3", "0.0.0.0", "255.255.255.255", "256.1.1.1", "01.1.1.1", "1.1.1", "1.1.1.1.", ".1.1.1", "1..1.1", "1.1.1.1a", "::ffff:1.2.3.4", "1.2.3.4%eth0", "00.0.0.0", "1.2.3.-4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := netip.ParseAddr(s)
		want := err == nil && a.Is4() && a.String() == s
		if got := canonicalIPv4(s); got != want {
			t.Errorf("canonicalIPv4(%q) = %v, netip says %v", s, got, want)
		}
	})
}

// The mesh holds an Endpoint per endpoint per port, the bulk of a large
// mesh's memory: a field added or moved should be a choice, not an
// accident of padding. (128 bytes until ServiceAccount came, for the
// identities mTLS clients verify: a string shared with the workload.)
func TestEndpointSize(t *testing.T) {
	if got := unsafe.Sizeof(Endpoint{}); got != 144 {
		t.Errorf("Endpoint is %d bytes, want 144 (mind the padding when adding a field)", got)
	}
}
