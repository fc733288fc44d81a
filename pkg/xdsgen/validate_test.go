package xdsgen

import (
	"fmt"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// validateDeep runs ValidateAll on m and, since protoc-gen-validate does not
// look inside Any fields, on every message packed in an Any below it.
func validateDeep(m proto.Message) error {
	return eachMessage(m, func(m proto.Message) error {
		if v, ok := m.(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				return fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err)
			}
		}
		return nil
	})
}

// eachMessage calls fn on m and every message below it, unpacking Any,
// until fn returns an error.
func eachMessage(m proto.Message, fn func(proto.Message) error) error {
	if err := fn(m); err != nil {
		return err
	}
	var walkErr error
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		var msgs []protoreflect.Message
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					msgs = append(msgs, mv.Message())
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i := range v.List().Len() {
					msgs = append(msgs, v.List().Get(i).Message())
				}
			}
		case fd.Message() != nil:
			msgs = append(msgs, v.Message())
		}
		for _, sub := range msgs {
			inner := sub.Interface()
			if a, ok := inner.(*anypb.Any); ok {
				un, err := a.UnmarshalNew()
				if err != nil {
					walkErr = fmt.Errorf("unpack %s: %w", a.GetTypeUrl(), err)
					return false
				}
				inner = un
			}
			if walkErr = eachMessage(inner, fn); walkErr != nil {
				return false
			}
		}
		return true
	})
	return walkErr
}

func TestEveryResourceValidates(t *testing.T) {
	m := variedMesh(t)
	for _, g := range []Generator{Envoy, GRPC} {
		for _, typeURL := range TypeURLs() {
			t.Run(g.String()+"/"+typeURL[len(resource.APITypePrefix):], func(t *testing.T) {
				set, err := Generate(m, g, typeURL)
				if err != nil {
					t.Fatal(err)
				}
				if len(set.Resources) == 0 {
					t.Fatal("no resources")
				}
				for _, r := range set.Resources {
					if r.Any.GetTypeUrl() != typeURL {
						t.Errorf("%s: Any type %q, want %q", r.Name, r.Any.GetTypeUrl(), typeURL)
					}
					if err := validateDeep(r.Msg); err != nil {
						t.Errorf("%s: %v", r.Name, err)
					}
					// The Any must hold exactly Msg.
					back, err := r.Any.UnmarshalNew()
					if err != nil {
						t.Fatalf("%s: %v", r.Name, err)
					}
					if !proto.Equal(back, r.Msg) {
						t.Errorf("%s: Any does not hold Msg", r.Name)
					}
				}
			})
		}
	}
}

// TestValidateDeepCatchesNestedErrors keeps the checker honest: an invalid
// message inside an Any must be reported.
func TestValidateDeepCatchesNestedErrors(t *testing.T) {
	l := proto.Clone(grpcListenerMsg(t, variedMesh(t), "web.shop.svc.cluster.local:80")).(*listenerv3.Listener)
	bad := rdsManager("", "x") // empty stat prefix is invalid
	l.ApiListener.ApiListener = mustAny(bad)
	if err := validateDeep(l); err == nil {
		t.Fatal("validateDeep accepted an invalid nested connection manager")
	}
}
