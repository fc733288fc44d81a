package bus

import (
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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
			if kind, ok := n.ChangeKind(tc.want); !ok || kind != EscapeToken(KindToken(tc.ref)) {
				t.Errorf("ChangeKind(%q) = %q, %v; want %q", tc.want, kind, ok, EscapeToken(KindToken(tc.ref)))
			}
		})
	}
}

func TestChangeKindRefusesOtherSubjects(t *testing.T) {
	n, err := NewNames("pw")
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"pw.pushes", "other.changes.c1.Service.ns.a", "pw.changes.c1.Service.ns", "pw.changes.c1"} {
		if kind, ok := n.ChangeKind(subj); ok {
			t.Errorf("ChangeKind(%q) = %q, want none", subj, kind)
		}
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

func TestParseRegistryKey(t *testing.T) {
	type parsed struct {
		Kind, Frontend, Conn string
		OK                   bool
	}
	tests := []struct {
		name string
		key  string
		want parsed
	}{
		{name: "frontend", key: FrontendKey("fe-1"), want: parsed{Kind: FrontendKeyKind, Frontend: "fe-1", OK: true}},
		{name: "frontend with dots", key: FrontendKey("a.b"), want: parsed{Kind: FrontendKeyKind, Frontend: "a.b", OK: true}},
		{name: "empty frontend", key: FrontendKey(""), want: parsed{Kind: FrontendKeyKind, Frontend: "", OK: true}},
		{name: "connection", key: ConnKey("fe-1", "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local-7"),
			want: parsed{Kind: ConnKeyKind, Frontend: "fe-1", Conn: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local-7", OK: true}},
		{name: "connection with empty ids", key: ConnKey("", ""), want: parsed{Kind: ConnKeyKind, OK: true}},
		{name: "frontend key with a conn part", key: "fe.a.b"},
		{name: "conn key without a conn part", key: "conn.a"},
		{name: "unknown kind", key: "lease.a"},
		{name: "empty", key: ""},
		{name: "bad escape", key: "fe.a=2"},
		{name: "bad escape in conn", key: "conn.a.=ZZ"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got parsed
			got.Kind, got.Frontend, got.Conn, got.OK = ParseRegistryKey(tc.key)
			if !got.OK {
				got = parsed{} // what a bad key's parts parse to does not matter
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseRegistryKey(%q) (-want +got):\n%s", tc.key, diff)
			}
		})
	}
}
