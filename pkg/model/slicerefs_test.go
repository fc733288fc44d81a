package model

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// checkSliceRefs fails unless DecodeSliceRefs either declines raw or
// fills what encoding/json fills (an empty list and none alike). It
// reports whether the fast path took it.
func checkSliceRefs(t *testing.T, raw []byte) bool {
	t.Helper()
	got, ok := DecodeSliceRefs(raw)
	if !ok {
		return false
	}
	var want SliceRefs
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatalf("%q: the fast path took what encoding/json refuses (%v)", raw, err)
	}
	if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
		t.Fatalf("%q: fast path differs from encoding/json (-want +got):\n%s", raw, d)
	}
	return true
}

func TestDecodeSliceRefs(t *testing.T) {
	raw, err := os.ReadFile("testdata/decode/endpointslice.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		raw  string
		fast bool
	}{
		{"the benchmark mesh's slice", string(raw), true},
		{"a slice of two pods on nodes", `{"metadata":{"name":"web-abc","labels":{"kubernetes.io/service-name":"web"}},"addressType":"IPv4","ports":[{"name":"http","port":8080,"protocol":"TCP","appProtocol":"http"},{"port":9090}],"endpoints":[{"addresses":["10.0.0.1"],"targetRef":{"kind":"Pod","namespace":"shop","name":"web-0","uid":"u"},"nodeName":"n1"},{"addresses":["10.0.0.2"],"nodeName":"n2"}]}`, true},
		{"no endpoints, no ports", `{"metadata":{"name":"x"},"endpoints":[],"ports":[]}`, true},
		{"an empty port", `{"ports":[{}]}`, true},
		{"a negative port", `{"ports":[{"port":-1}]}`, true},
		{"null endpoints", `{"endpoints":null}`, false},
		{"a null target", `{"endpoints":[{"targetRef":null}]}`, false},
		{"a null port name", `{"ports":[{"name":null}]}`, false},
		{"a port past int32", `{"ports":[{"port":2147483648}]}`, false},
		{"a port with a fraction", `{"ports":[{"port":80.0}]}`, false},
		{"ports twice", `{"ports":[{"port":1}],"ports":[{"port":2}]}`, false},
		{"nodeName in another case", `{"endpoints":[{"NodeName":"n1"}]}`, false},
		{"an escaped pod name", `{"endpoints":[{"targetRef":{"kind":"Pod","name":"a\u0062"}}]}`, false},
		{"invalid JSON in a skipped field", `{"addressType":tru,"endpoints":[]}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if took := checkSliceRefs(t, []byte(c.raw)); took != c.fast {
				t.Fatalf("fast path took it: %v, want %v", took, c.fast)
			}
		})
	}
}

// FuzzSliceRefs: whatever DecodeSliceRefs takes, it decodes as
// encoding/json does.
func FuzzSliceRefs(f *testing.F) {
	raw, err := os.ReadFile("testdata/decode/endpointslice.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add([]byte(`{"metadata":{"labels":{"kubernetes.io/service-name":"web"}},"ports":[{"name":"http","port":8080,"protocol":"TCP"}],"endpoints":[{"targetRef":{"kind":"Pod","namespace":"shop","name":"web-0"},"nodeName":"n1"}]}`))
	f.Add([]byte(`{"ports":[{}],"endpoints":[{}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) { checkSliceRefs(t, raw) })
}

func BenchmarkSliceRefs(b *testing.B) {
	raw, err := os.ReadFile("testdata/decode/endpointslice.json")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r, ok := DecodeSliceRefs(raw); !ok || len(r.Endpoints) != 10 {
				b.Fatal(ok, len(r.Endpoints))
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r SliceRefs
			if err := json.Unmarshal(raw, &r); err != nil || len(r.Endpoints) != 10 {
				b.Fatal(err, len(r.Endpoints))
			}
		}
	})
}
