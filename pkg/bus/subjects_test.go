package bus

import (
	"regexp"
	"strings"
	"testing"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

func TestChangeSubject(t *testing.T) {
	n, err := NewNames("pw")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cluster string
		ref     *pb.ObjectRef
		want    string
	}{
		{name: "core kind", cluster: "Kubernetes", ref: &pb.ObjectRef{Kind: "Service", Namespace: "default", Name: "echo"},
			want: "pw.changes.Kubernetes.Service.default.echo"},
		{name: "group kind, dotted name", cluster: "c1", ref: &pb.ObjectRef{Group: "discovery.k8s.io", Kind: "EndpointSlice", Namespace: "ns", Name: "a.b"},
			want: "pw.changes.c1.EndpointSlice=2Ediscovery=2Ek8s=2Eio.ns.a=2Eb"},
		{name: "cluster-scoped", cluster: "c1", ref: &pb.ObjectRef{Kind: "Node", Name: "n1"},
			want: "pw.changes.c1.Node._.n1"},
		{name: "wildcards and spaces escaped", cluster: "a b", ref: &pb.ObjectRef{Kind: "X", Namespace: "*", Name: ">"},
			want: "pw.changes.a=20b.X.=2A.=3E"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := n.ChangeSubject(tc.cluster, tc.ref); got != tc.want {
				t.Errorf("ChangeSubject() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewNamesRejectsBadPrefix(t *testing.T) {
	for _, p := range []string{"a.b", "a*", "a b", ">"} {
		if _, err := NewNames(p); err == nil {
			t.Errorf("NewNames(%q) accepted", p)
		}
	}
	if n, err := NewNames(""); err != nil || n.Prefix != DefaultPrefix || n.ChangesStream() != "PW_CHANGES" {
		t.Errorf("NewNames(\"\") = %+v, %v", n, err)
	}
}

// validKey is what nats.go accepts as a KV key.
var validKey = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

// FuzzEscapeToken: every string escapes to one valid subject token and back.
func FuzzEscapeToken(f *testing.F) {
	for _, s := range []string{"", "a.b", "%", "%00", "=", "=00", "x y>z*", "naïve", "a=2Eb", "a/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := EscapeToken(s)
		if tok == "" || !validKey.MatchString(tok) || strings.ContainsAny(tok, ".*>/\\") {
			t.Fatalf("EscapeToken(%q) = %q is not one subject token, KV key token and consumer name", s, tok)
		}
		back, err := UnescapeToken(tok)
		if err != nil || back != s {
			t.Fatalf("UnescapeToken(EscapeToken(%q)) = %q, %v", s, back, err)
		}
	})
}
