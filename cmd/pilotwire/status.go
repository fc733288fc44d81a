package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// statusConfig is what status reads.
type statusConfig struct {
	connConfig
	// MeshConfig is the frontends' --mesh-config file ("" for Istio's
	// defaults, as theirs): it decides how bad some left-out config is.
	MeshConfig string
}

func newStatusCmd() *cobra.Command {
	var c statusConfig
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Every connected proxy with its frontend and, per type, the version sent and acknowledged (as istioctl proxy-status), and the config pilotwire leaves out",
		Long: `status lists the connections of the registry (PW_REGISTRY) and, per type,
what the DELIVERIES stream says they were last sent and answered: SYNCED
(the last response was ACKed), STALE (sent, not answered yet), NACKED (with
the error) or NOT SENT. NACKed and stale proxies come first.

It then lists the config of the change stream that every frontend leaves
out because pilotwire does not translate it (AuthorizationPolicies,
EnvoyFilters, TCPRoutes, a Sidecar's ingress, ...),
as the frontends log it: severity error when leaving it out lets through
traffic it would refuse (a DENY policy), warning otherwise. Config left
out because it is invalid is in each frontend's /debug/configz.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runStatus(cmd.Context(), os.Stdout, c) },
	}
	addConnFlags(cmd, &c.connConfig)
	cmd.Flags().StringVar(&c.MeshConfig, "mesh-config", "", "the frontends' --mesh-config file (default: Istio's defaults, as theirs)")
	return cmd
}

// typeStatus is one type of one connection.
type typeStatus struct {
	State      string    `json:"state"` // SYNCED, STALE, NACKED, NOT SENT
	Sent       string    `json:"sent,omitempty"`
	Acked      string    `json:"acked,omitempty"`
	ThroughSeq uint64    `json:"throughSeq,omitempty"`
	SentAt     time.Time `json:"sentAt,omitzero"`
	Error      string    `json:"error,omitempty"`
}

// proxyStatus is one connection.
type proxyStatus struct {
	Node      string `json:"node"`
	Frontend  string `json:"frontend"`
	Conn      string `json:"conn"`
	ClusterID string `json:"clusterID,omitempty"`
	Type      string `json:"proxyType,omitempty"`
	// SentSeq is the newest change sequence a response to it was generated
	// from (types the changes since did not alter are not resent).
	SentSeq uint64                `json:"sentSeq"`
	Types   map[string]typeStatus `json:"types"`
}

// rank orders NACKed first, then stale, then the rest.
func (p proxyStatus) rank() int {
	r := 2
	for _, t := range p.Types {
		switch t.State {
		case "NACKED":
			return 0
		case "STALE":
			r = 1
		}
	}
	return r
}

type statusReport struct {
	LatestSeq uint64        `json:"latestSeq"`
	Proxies   []proxyStatus `json:"proxies"`
	// Ignored is the config pilotwire does not translate, errors first.
	Ignored []ignoredConfig `json:"ignored"`
}

func runStatus(ctx context.Context, w io.Writer, c statusConfig) error {
	mc, err := meshconfig.Load(c.MeshConfig)
	if err != nil {
		return err
	}
	ctx, s, done, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	rep, err := status(ctx, s)
	if err != nil {
		return err
	}
	if rep.Ignored, err = unsupportedConfig(ctx, s, mc); err != nil {
		return err
	}
	return emit(w, c.Output, rep, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "NAME\tFRONTEND\tCDS\tEDS\tLDS\tRDS\tSENT_SEQ/LATEST")
		for _, p := range rep.Proxies {
			cell := func(t string) string {
				ts, ok := p.Types[t]
				if !ok {
					return "NOT SENT"
				}
				if ts.Sent == "" {
					return ts.State
				}
				return ts.State + " (" + ts.Sent[:min(8, len(ts.Sent))] + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\n", p.Node, p.Frontend, cell("cds"), cell("eds"), cell("lds"), cell("rds"), p.SentSeq, rep.LatestSeq)
		}
		tw.Flush()
		for _, p := range rep.Proxies {
			for _, t := range xdsTypes {
				if ts := p.Types[t.short]; ts.Error != "" {
					fmt.Fprintf(tw, "%s %s NACK: %s\n", p.Node, t.short, ts.Error)
				}
			}
		}
		if len(rep.Ignored) == 0 {
			return
		}
		errs := 0
		for _, i := range rep.Ignored {
			if i.Severity == "error" {
				errs++
			}
		}
		fmt.Fprintf(tw, "\nCONFIG NOT APPLIED (errors: %d, warnings: %d)\nSEVERITY\tOBJECT\tREASON\n", errs, len(rep.Ignored)-errs)
		for _, i := range rep.Ignored {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", i.Severity, i.Object, i.Reason)
		}
	})
}

func status(ctx context.Context, s *session) (*statusReport, error) {
	kv, err := s.js.KeyValue(ctx, s.names.RegistryBucket())
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", s.names.RegistryBucket(), err)
	}
	watcher, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read registry: %w", err)
	}
	defer watcher.Stop()
	var conns []*pb.ConnectionInfo
	for e := range watcher.Updates() {
		if e == nil { // the initial values are all in
			break
		}
		if kind, _, _, ok := bus.ParseRegistryKey(e.Key()); !ok || kind != bus.ConnKeyKind {
			continue
		}
		ci := &pb.ConnectionInfo{}
		if proto.Unmarshal(e.Value(), ci) == nil {
			conns = append(conns, ci)
		}
	}
	rep := &statusReport{Proxies: []proxyStatus{}}
	if changes, err := s.js.Stream(ctx, s.names.ChangesStream()); err == nil {
		if info, err := changes.Info(ctx); err == nil {
			rep.LatestSeq = info.State.LastSeq
		}
	}
	// What each connection was last sent and answered, per type.
	var subjects []string
	seen := map[string]bool{}
	for _, ci := range conns {
		if fe := ci.GetFrontend(); !seen[fe] {
			seen[fe] = true
			subjects = append(subjects, s.names.DeliveriesOf(fe))
		}
	}
	if len(subjects) > 64 {
		subjects = nil // the whole stream: one filter, not thousands
	}
	var ds []delivery
	if len(conns) > 0 {
		ds, err = readDeliveries(ctx, s, subjects)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, err
		}
	}
	type connType struct{ fe, conn, typ string }
	last := map[connType]typeStatus{}
	for _, d := range ds {
		r := d.Rec
		k := connType{r.GetFrontend(), r.GetConnId(), shortOf(r.GetTypeUrl())}
		ts := last[k]
		switch r.GetKind() {
		case pb.DeliveryRecord_RESPONSE:
			ts.Sent, ts.ThroughSeq, ts.SentAt, ts.Error = r.GetVersion(), r.GetThroughSeq(), r.GetAt().AsTime(), ""
		case pb.DeliveryRecord_ACK:
			ts.Acked, ts.Error = r.GetVersion(), ""
		case pb.DeliveryRecord_NACK:
			ts.Error = r.GetError()
		}
		last[k] = ts
	}
	for _, ci := range conns {
		p := proxyStatus{Node: ci.GetNodeId(), Frontend: ci.GetFrontend(), Conn: ci.GetConnId(), ClusterID: ci.GetClusterId(),
			Type: ci.GetProxyType(), Types: map[string]typeStatus{}}
		for _, wt := range ci.GetWatches() {
			t := shortOf(wt.GetTypeUrl())
			ts, ok := last[connType{ci.GetFrontend(), ci.GetConnId(), t}]
			if !ok { // no delivery records: what the registry entry says
				ts = typeStatus{Sent: wt.GetSentVersion(), Acked: wt.GetAckedVersion(), Error: wt.GetNackError()}
			}
			switch {
			case ts.Error != "":
				ts.State = "NACKED"
			case ts.Sent == "":
				ts.State = "NOT SENT"
			case ts.Sent == ts.Acked:
				ts.State = "SYNCED"
			default:
				ts.State = "STALE"
			}
			p.Types[t] = ts
			p.SentSeq = max(p.SentSeq, ts.ThroughSeq)
		}
		rep.Proxies = append(rep.Proxies, p)
	}
	slices.SortFunc(rep.Proxies, func(a, b proxyStatus) int {
		return cmp.Or(cmp.Compare(a.rank(), b.rank()), strings.Compare(a.Node, b.Node), strings.Compare(a.Conn, b.Conn))
	})
	return rep, nil
}
