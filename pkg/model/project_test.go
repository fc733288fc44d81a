package model

import "testing"

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
