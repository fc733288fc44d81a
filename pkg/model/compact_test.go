package model

import (
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// compactRecords are change records around the compact form's edges:
// the mesh's shapes, the fast decoder's edge cases as a Service and as an
// EndpointSlice, other kinds and ops, and objects that do not decode.
func compactRecords(t testing.TB) []*pb.ChangeRecord {
	t.Helper()
	svcRef := &pb.ObjectRef{Kind: KindService, Namespace: "ns-00", Name: "svc-00000"}
	sliceRef := &pb.ObjectRef{Group: GroupDiscovery, Kind: KindEndpointSlice, Namespace: "ns-00", Name: "svc-00000-0"}
	rec := func(ref *pb.ObjectRef, op pb.Op, obj string) *pb.ChangeRecord {
		return &pb.ChangeRecord{Cluster: "c1", Ref: ref, Op: op, Uid: "u-" + ref.GetName(), ResourceVersion: "7", Object: []byte(obj)}
	}
	var out []*pb.ChangeRecord
	for name, ref := range map[string]*pb.ObjectRef{"service.json": svcRef, "endpointslice.json": sliceRef} {
		raw, err := os.ReadFile("testdata/decode/" + name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec(ref, pb.Op_OP_ADD, string(raw)), rec(ref, pb.Op_OP_UPDATE, string(raw)), rec(ref, pb.Op_OP_DELETE, string(raw)))
	}
	for _, c := range fastDecodeCases {
		out = append(out, rec(svcRef, pb.Op_OP_ADD, c.raw), rec(sliceRef, pb.Op_OP_UPDATE, c.raw))
	}
	out = append(out,
		rec(&pb.ObjectRef{Kind: KindPod, Namespace: "a", Name: "p"}, pb.Op_OP_ADD, `{"metadata":{"labels":{"app":"a"}},"status":{"podIP":"10.0.0.1"}}`),
		rec(&pb.ObjectRef{Kind: KindService, Namespace: "a"}, pb.Op_OP_ADD, `{}`), // no name
		rec(sliceRef, pb.Op_OP_ADD, `{"endpoints":[{"addresses":[],"conditions":{"ready":false},"targetRef":{"kind":"Node","name":"n"}},{"addresses":["10.0.0.1","10.0.0.2"],"zone":"z"}],"ports":null,"metadata":{"labels":{}}}`),
		rec(sliceRef, pb.Op_OP_ADD, `{"endpoints":[]}`),
		rec(svcRef, pb.Op_OP_ADD, `{"spec":{"ports":[{"targetPort":"x","appProtocol":""}]},"metadata":{"annotations":{}}}`),
	)
	return out
}

// checkCompact fails unless the record's compact form, when it has one,
// decodes to exactly what Decode makes of the record, and unless the
// records that must keep one (Service and EndpointSlice objects that
// decode) have one.
func checkCompact(t *testing.T, rec *pb.ChangeRecord) {
	t.Helper()
	want := Decode(rec)
	b := CompactForm(rec)
	if b == nil {
		if want.err == nil && want.e != nil && (want.e.svc != nil || want.e.slice != nil) {
			t.Fatalf("no compact form for %s %s, which decodes", rec.GetOp(), want.key)
		}
		return
	}
	got, err := DecodeCompact(b)
	if err != nil {
		t.Fatalf("DecodeCompact of %s %s: %v", rec.GetOp(), want.key, err)
	}
	// Op, uid and resourceVersion included.
	opts := cmp.Options{cmp.AllowUnexported(Decoded{}, entry{}), slimCmp}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Fatalf("compact form of %s %s decodes otherwise (-Decode +DecodeCompact):\n%s", rec.GetOp(), want.key, diff)
	}
}

// TestCompactForm: every record of compactRecords round-trips; a cut or
// changed form is refused, never decoded into something else unnoticed
// when it is shorter.
func TestCompactForm(t *testing.T) {
	forms := 0
	for _, rec := range compactRecords(t) {
		checkCompact(t, rec)
		if b := CompactForm(rec); b != nil {
			forms++
			for i := range b {
				if _, err := DecodeCompact(b[:i]); err == nil {
					t.Fatalf("%s: the form cut to %d of %d bytes decoded", rec.GetRef().GetName(), i, len(b))
				}
			}
		}
	}
	if forms < 10 {
		t.Errorf("only %d records had a compact form", forms)
	}
}

// FuzzCompactForm: whatever the object, a Service's or EndpointSlice's
// compact form decodes to what Decode makes of the record; whatever the
// bytes, DecodeCompact does not panic.
func FuzzCompactForm(f *testing.F) {
	for _, rec := range compactRecords(f) {
		f.Add(rec.GetObject(), rec.GetRef().GetKind() == KindService)
		if b := CompactForm(rec); b != nil {
			f.Add(b, false)
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, service bool) {
		_, _ = DecodeCompact(raw)
		ref := &pb.ObjectRef{Group: GroupDiscovery, Kind: KindEndpointSlice, Namespace: "n", Name: "s"}
		if service {
			ref = &pb.ObjectRef{Kind: KindService, Namespace: "n", Name: "s"}
		}
		checkCompact(t, &pb.ChangeRecord{Cluster: "c", Ref: ref, Op: pb.Op_OP_UPDATE, Uid: "u", ResourceVersion: "1", Object: raw})
	})
}

// TestCompactFormsOfTheFirstWriter: Service and EndpointSlice forms
// written before the model kept them slim (every label, every address,
// appProtocol, readiness true;
// testdata/compact/first-writer.txt, written by 5513ae1) decode to
// what Decode makes of their records today. Snapshots written by a
// debouncer of that build hold such forms.
func TestCompactFormsOfTheFirstWriter(t *testing.T) {
	raw, err := os.ReadFile("testdata/compact/first-writer.txt")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(raw)) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			t.Fatalf("bad line %q", line)
		}
		data, err := hex.DecodeString(fields[0])
		if err != nil {
			t.Fatal(err)
		}
		form, err := hex.DecodeString(fields[1])
		if err != nil {
			t.Fatal(err)
		}
		rec := &pb.ChangeRecord{}
		if err := proto.Unmarshal(data, rec); err != nil {
			t.Fatal(err)
		}
		want := Decode(rec)
		got, err := DecodeCompact(form)
		if err != nil {
			t.Fatalf("DecodeCompact of the first writer's form of %s: %v", want.key, err)
		}
		opts := cmp.Options{cmp.AllowUnexported(Decoded{}, entry{}), slimCmp}
		if diff := cmp.Diff(want, got, opts); diff != "" {
			t.Fatalf("the first writer's form of %s decodes otherwise (-Decode +DecodeCompact):\n%s", want.key, diff)
		}
		n++
	}
	if n != 49 {
		t.Fatalf("%d forms checked, want the file's 49", n)
	}
}
