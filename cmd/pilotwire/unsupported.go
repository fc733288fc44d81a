package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// ignoredConfig is config every frontend leaves out.
type ignoredConfig struct {
	Object   string `json:"object"`
	Severity string `json:"severity"` // error: leaving it out lets through traffic it would refuse
	Reason   string `json:"reason"`
}

// unsupportedConfig lists what frontends with mesh config mc leave out
// of the config pilotwire does not translate (model.Unsupported), errors
// first. It reads only the current record of each object of those kinds
// (the last of its subject), not the whole history, and builds no model.
func unsupportedConfig(ctx context.Context, s *session, mc *meshconfig.MeshConfig) ([]ignoredConfig, error) {
	stream, err := s.js.Stream(ctx, s.names.ChangesStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return []ignoredConfig{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("changes stream: %w", err)
	}
	var filter []string
	for _, gk := range model.UnsupportedKinds() {
		filter = append(filter, s.names.ChangesKind(&pb.ObjectRef{Group: gk.Group, Kind: gk.Kind}))
	}
	out := []ignoredConfig{}
	err = scanStream(ctx, stream, scanOptions{Filter: filter, LastPerSubject: true}, func(msg jetstream.Msg, _ *jetstream.MsgMetadata) error {
		rec := &pb.ChangeRecord{}
		if proto.Unmarshal(msg.Data(), rec) != nil {
			return nil // frontends count it as a bad record; not config they leave out
		}
		for _, p := range model.Unsupported(rec, mc) {
			out = append(out, ignoredConfig{Object: p.Object, Severity: p.Severity.String(), Reason: p.Reason})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read unsupported config: %w", err)
	}
	slices.SortFunc(out, func(a, b ignoredConfig) int {
		// "error" sorts before "warning".
		return cmp.Or(strings.Compare(a.Severity, b.Severity), strings.Compare(a.Object, b.Object), strings.Compare(a.Reason, b.Reason))
	})
	return out, nil
}
