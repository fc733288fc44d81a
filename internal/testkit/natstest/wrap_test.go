package natstest_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWrapHooksEveryOpen opens a bucket, stream or object store through
// every method of jetstream.JetStream that returns one, and checks that
// each went through its hook, then that each fails with Fail's error. A
// method nats.go adds that returns one of them and has no case below
// fails the test.
func TestWrapHooksEveryOpen(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	var kvs, streams, objs int
	fail := func(string, string) error { return nil }
	w := natstest.Wrap(js, natstest.Hooks{
		KeyValue:    func(kv jetstream.KeyValue) jetstream.KeyValue { kvs++; return kv },
		Stream:      func(s jetstream.Stream) jetstream.Stream { streams++; return s },
		ObjectStore: func(o jetstream.ObjectStore) jetstream.ObjectStore { objs++; return o },
		Fail:        func(method, name string) error { return fail(method, name) },
	})
	kvCfg := jetstream.KeyValueConfig{Bucket: "kv"}
	streamCfg := jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}
	objCfg := jetstream.ObjectStoreConfig{Bucket: "obj"}
	type open struct {
		count *int
		call  func(context.Context) error
	}
	opens := map[string]open{
		"CreateKeyValue":         {&kvs, func(ctx context.Context) error { _, err := w.CreateKeyValue(ctx, kvCfg); return err }},
		"KeyValue":               {&kvs, func(ctx context.Context) error { _, err := w.KeyValue(ctx, "kv"); return err }},
		"UpdateKeyValue":         {&kvs, func(ctx context.Context) error { _, err := w.UpdateKeyValue(ctx, kvCfg); return err }},
		"CreateOrUpdateKeyValue": {&kvs, func(ctx context.Context) error { _, err := w.CreateOrUpdateKeyValue(ctx, kvCfg); return err }},
		"CreateStream":           {&streams, func(ctx context.Context) error { _, err := w.CreateStream(ctx, streamCfg); return err }},
		"Stream":                 {&streams, func(ctx context.Context) error { _, err := w.Stream(ctx, "S"); return err }},
		"UpdateStream":           {&streams, func(ctx context.Context) error { _, err := w.UpdateStream(ctx, streamCfg); return err }},
		"CreateOrUpdateStream":   {&streams, func(ctx context.Context) error { _, err := w.CreateOrUpdateStream(ctx, streamCfg); return err }},
		"CreateObjectStore":      {&objs, func(ctx context.Context) error { _, err := w.CreateObjectStore(ctx, objCfg); return err }},
		"ObjectStore":            {&objs, func(ctx context.Context) error { _, err := w.ObjectStore(ctx, "obj"); return err }},
		"UpdateObjectStore":      {&objs, func(ctx context.Context) error { _, err := w.UpdateObjectStore(ctx, objCfg); return err }},
		"CreateOrUpdateObjectStore": {&objs, func(ctx context.Context) error {
			_, err := w.CreateOrUpdateObjectStore(ctx, objCfg)
			return err
		}},
	}

	opened := map[reflect.Type]bool{
		reflect.TypeFor[jetstream.KeyValue]():    true,
		reflect.TypeFor[jetstream.Stream]():      true,
		reflect.TypeFor[jetstream.ObjectStore](): true,
	}
	iface := reflect.TypeFor[jetstream.JetStream]()
	var names []string
	for i := range iface.NumMethod() {
		m := iface.Method(i)
		for j := range m.Type.NumOut() {
			if opened[m.Type.Out(j)] {
				names = append(names, m.Name)
				if _, ok := opens[m.Name]; !ok {
					t.Errorf("jetstream.JetStream.%s returns a %v and has no case here: hook it in Wrap and add it", m.Name, m.Type.Out(j))
				}
			}
		}
	}
	if len(names) != len(opens) {
		t.Errorf("methods that open something = %v, cases = %d", names, len(opens))
	}

	// Create before the rest, so that opening and updating find something.
	order := []string{"CreateKeyValue", "CreateStream", "CreateObjectStore"}
	for name := range opens {
		if name != "CreateKeyValue" && name != "CreateStream" && name != "CreateObjectStore" {
			order = append(order, name)
		}
	}
	for _, name := range order {
		o := opens[name]
		ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
		before := *o.count
		if err := o.call(ctx); err != nil {
			t.Errorf("%s: %v", name, err)
		} else if *o.count != before+1 {
			t.Errorf("%s did not go through its hook", name)
		}
		cancel()
	}

	// Fail runs before each of them, with its name, and its error is the
	// call's.
	injected := errors.New("injected")
	var failed []string
	fail = func(method, name string) error {
		failed = append(failed, method+" "+name)
		return injected
	}
	for _, name := range order {
		o := opens[name]
		ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
		before := *o.count
		if err := o.call(ctx); !errors.Is(err, injected) {
			t.Errorf("%s with Fail set: err %v, want the injected one", name, err)
		}
		if *o.count != before {
			t.Errorf("%s with Fail set went through its hook", name)
		}
		cancel()
	}
	var want []string
	for _, name := range order {
		target := map[*int]string{&kvs: "kv", &streams: "S", &objs: "obj"}[opens[name].count]
		want = append(want, name+" "+target)
	}
	if diff := cmp.Diff(want, failed); diff != "" {
		t.Errorf("Fail calls (-want +got):\n%s", diff)
	}
}

// TestWrapPassesFailuresThrough: a hook is not called when opening failed,
// and the caller sees the error.
func TestWrapPassesFailuresThrough(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	called := false
	w := natstest.Wrap(js, natstest.Hooks{KeyValue: func(kv jetstream.KeyValue) jetstream.KeyValue { called = true; return kv }})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	if _, err := w.KeyValue(ctx, "missing"); err == nil {
		t.Error("KeyValue(missing) = nil error")
	}
	if called {
		t.Error("hook called for a bucket that failed to open")
	}
}
