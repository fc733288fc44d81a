package model

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// stdLabels is what ObjectLabels stands in for.
func stdLabels(raw []byte) (map[string]string, error) {
	var o struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	err := json.Unmarshal(raw, &o)
	return o.Metadata.Labels, err
}

// checkLabels fails unless ObjectLabels either declines raw or gives
// exactly what encoding/json gives (nil and empty maps apart). It reports
// whether the fast path took it.
func checkLabels(t *testing.T, raw []byte) bool {
	t.Helper()
	got, ok := ObjectLabels(raw)
	if !ok {
		return false
	}
	want, err := stdLabels(raw)
	if err != nil {
		t.Fatalf("%q: the fast path took what encoding/json refuses (%v)", raw, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: fast path gives %#v, encoding/json %#v", raw, got, want)
	}
	return true
}

func TestObjectLabels(t *testing.T) {
	for _, c := range []struct {
		name string
		raw  string
		fast bool
	}{
		{"a pod", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"shop","labels":{"app":"web","version":"v1"},"annotations":{"a":"\u00e9"}},"spec":{"containers":[{"name":"c","ports":[{"containerPort":8080}]}]},"status":{"podIP":"10.0.0.1"}}`, true},
		{"no labels", `{"metadata":{"name":"x"}}`, true},
		{"no metadata", `{"kind":"Pod"}`, true},
		{"empty labels", `{"metadata":{"labels":{}}}`, true},
		{"a repeated label, the last wins", `{"metadata":{"labels":{"a":"1","a":"2"}}}`, true},
		{"white space", " {\n \"metadata\" : { \"labels\" : { \"a\" : \"1\" } } }\t", true},
		{"null labels", `{"metadata":{"labels":null}}`, false},
		{"a null label", `{"metadata":{"labels":{"a":null}}}`, false},
		{"an escaped label", `{"metadata":{"labels":{"a":"\u0031"}}}`, false},
		{"a non-ASCII label", `{"metadata":{"labels":{"a":"é"}}}`, false},
		{"metadata twice", `{"metadata":{"labels":{"a":"1"}},"metadata":{"labels":{"b":"2"}}}`, false},
		{"labels twice", `{"metadata":{"labels":{"a":"1"},"labels":{"b":"2"}}}`, false},
		{"Metadata in another case", `{"Metadata":{"labels":{"a":"1"}}}`, false},
		{"a number label", `{"metadata":{"labels":{"a":1}}}`, false},
		{"invalid JSON after", `{"metadata":{"labels":{"a":"1"}}} x`, false},
		{"invalid JSON in a skipped field", `{"spec":{"a":01},"metadata":{"labels":{"a":"1"}}}`, false},
		{"not an object", `[]`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if took := checkLabels(t, []byte(c.raw)); took != c.fast {
				t.Fatalf("fast path took it: %v, want %v", took, c.fast)
			}
		})
	}
}

// FuzzObjectLabels: whatever ObjectLabels takes, it decodes as
// encoding/json does.
func FuzzObjectLabels(f *testing.F) {
	for _, name := range []string{"service.json", "endpointslice.json"} {
		raw, err := os.ReadFile("testdata/decode/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte(`{"metadata":{"name":"web-0","labels":{"app":"web","pod-template-hash":"5d4f8"}},"spec":{"nodeName":"n1"}}`))
	f.Add([]byte(`{"metadata":{"labels":{"a":"1","a":"2"}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) { checkLabels(t, raw) })
}

func BenchmarkObjectLabels(b *testing.B) {
	raw := []byte(benchPod)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if l, ok := ObjectLabels(raw); !ok || len(l) != 6 {
				b.Fatal(l, ok)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if l, err := stdLabels(raw); err != nil || len(l) != 6 {
				b.Fatal(l, err)
			}
		}
	})
}

// checkPod fails unless fastPod either declines raw or reads what stdPod
// reads. It reports whether the fast path took it.
func checkPod(t *testing.T, raw []byte) bool {
	t.Helper()
	got, ok := fastPod(raw)
	if !ok {
		return false
	}
	want, err := stdPod(raw)
	if err != nil {
		t.Fatalf("%q: the fast path took what encoding/json refuses (%v)", raw, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: fast path gives %#v, encoding/json %#v", raw, got, want)
	}
	return true
}

func TestFastPod(t *testing.T) {
	for _, c := range []struct {
		name string
		raw  string
		fast bool
	}{
		{"a pod", benchPod, true},
		{"no status", `{"metadata":{"labels":{"app":"web"}},"spec":{"nodeName":"n1"}}`, true},
		{"a non-canonical IP", `{"status":{"podIP":"10.000.0.1"}}`, true},
		{"an IPv6 pod", `{"status":{"podIP":"2001:DB8::1"}}`, true},
		{"an empty condition", `{"status":{"conditions":[{}]}}`, true},
		{"a null condition", `{"status":{"conditions":[null]}}`, false},
		{"a condition that is a number", `{"status":{"conditions":[1]}}`, false},
		{"conditions that are not a list", `{"status":{"conditions":{}}}`, false},
		{"a numeric node name", `{"spec":{"nodeName":1}}`, false},
		{"spec twice", `{"spec":{"nodeName":"a"},"spec":{"nodeName":"b"}}`, false},
		{"an escaped IP", `{"status":{"podIP":"10.0.0.\u0031"}}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if took := checkPod(t, []byte(c.raw)); took != c.fast {
				t.Fatalf("fast path took it: %v, want %v", took, c.fast)
			}
		})
	}
}

// FuzzFastPod: whatever fastPod takes, it reads as stdPod does.
func FuzzFastPod(f *testing.F) {
	f.Add([]byte(benchPod))
	f.Add([]byte(`{"metadata":{"labels":{"a":"1"}},"spec":{"nodeName":"n"},"status":{"podIP":"::1","conditions":[{"type":"Ready","status":"True"}]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) { checkPod(t, raw) })
}

const benchPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-5d4f8-x2x9q","namespace":"shop","uid":"6f1c","resourceVersion":"123456","labels":{"app":"web","pod-template-hash":"5d4f8","security.istio.io/tlsMode":"istio","service.istio.io/canonical-name":"web","service.istio.io/canonical-revision":"v1","version":"v1"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-5d4f8","uid":"1a2b"}]},"spec":{"nodeName":"node-1","serviceAccountName":"web"},"status":{"phase":"Running","podIP":"10.244.1.5","podIPs":[{"ip":"10.244.1.5"}],"conditions":[{"type":"Ready","status":"True"},{"type":"ContainersReady","status":"True"}]}}`

func BenchmarkDecodePod(b *testing.B) {
	raw := []byte(benchPod)
	for _, c := range []struct {
		name string
		dec  func([]byte) (*pod, error)
	}{{"fast", decodePod}, {"encoding-json", stdPod}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if p, err := c.dec(raw); err != nil || len(p.labels) != 6 {
					b.Fatal(p, err)
				}
			}
		})
	}
}
