package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

type traceConfig struct {
	connConfig
	// Cluster is the cluster id of an OBJECT argument (--cluster, default
	// Kubernetes).
	Cluster string
}

func newTraceCmd() *cobra.Command {
	var c traceConfig
	cmd := &cobra.Command{
		Use:   "trace SEQ|KIND[.GROUP]/[NAMESPACE/]NAME",
		Short: "Follow one change: the PushRequest that merged it, the connections it reached, and their ACKs and NACKs",
		Long: `trace takes a change (its sequence in the CHANGES stream, or an object,
meaning its latest record) and shows the PushRequest(s) whose covered
ranges hold it (from PUSHES), then every connection that was sent a
response generated from a model including it: when, which version, and
whether the proxy ACKed or NACKed it, with the NACK's error (from
DELIVERIES). Types whose config the change did not alter get no response
and are not listed.`,
		Example: `  pilotwire trace 42
  pilotwire trace EndpointSlice.discovery.k8s.io/default/echo-1
  pilotwire trace Namespace/default`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runTrace(cmd.Context(), os.Stdout, c, args[0]) },
	}
	addConnFlags(cmd, &c.connConfig)
	cmd.Flags().StringVar(&c.Cluster, "cluster", "Kubernetes", "cluster id of an object argument")
	return cmd
}

// traceReport is everything trace found.
type traceReport struct {
	Change     historyEntry  `json:"change"`
	Pushes     []tracedPush  `json:"pushes"`
	Deliveries []tracedDeliv `json:"deliveries"`
}

type tracedPush struct {
	Seq          uint64    `json:"seq"` // in PUSHES
	Emitted      time.Time `json:"emitted"`
	Full         bool      `json:"full"`
	ThroughSeq   uint64    `json:"throughSeq"`
	Covered      []string  `json:"covered"`
	MergedEvents int32     `json:"mergedEvents"`
	ConfigKeys   int       `json:"configKeys"`
	Reasons      string    `json:"reasons,omitempty"`
}

type tracedDeliv struct {
	Frontend   string    `json:"frontend"`
	Conn       string    `json:"conn"`
	Node       string    `json:"node"`
	Type       string    `json:"type"`
	Version    string    `json:"version"`
	Nonce      string    `json:"nonce"`
	ThroughSeq uint64    `json:"throughSeq"`
	Sent       time.Time `json:"sent"`
	// Initial: the connection's first response of the type (it connected
	// after the change), not a push.
	Initial  bool      `json:"initial,omitempty"`
	Result   string    `json:"result"` // ACK, NACK or PENDING
	Answered time.Time `json:"answered,omitzero"`
	Error    string    `json:"error,omitempty"`
}

// traceSeq resolves the argument: a sequence, or an object's latest record.
func traceSeq(ctx context.Context, stream jetstream.Stream, names bus.Names, cluster, arg string) (uint64, error) {
	if n, err := strconv.ParseUint(arg, 10, 64); err == nil {
		return n, nil
	}
	parts := strings.Split(arg, "/")
	var ref *pb.ObjectRef
	switch len(parts) {
	case 2:
		ref = &pb.ObjectRef{Kind: parts[0], Name: parts[1]}
	case 3:
		ref = &pb.ObjectRef{Kind: parts[0], Namespace: parts[1], Name: parts[2]}
	default:
		return 0, fmt.Errorf("%q: want a sequence or KIND[.GROUP]/[NAMESPACE/]NAME", arg)
	}
	if k, g, ok := strings.Cut(ref.Kind, "."); ok {
		ref.Kind, ref.Group = k, g
	}
	subject := names.ChangeSubject(cluster, ref)
	last, err := bus.LastMsg(ctx, stream, subject)
	if err != nil {
		return 0, err
	}
	if last == nil {
		return 0, fmt.Errorf("no record of %s in cluster %s (%s)", arg, cluster, subject)
	}
	return last.Sequence, nil
}

// covers reports whether a PushRequest carries change seq.
func covers(r *pb.PushRequest, seq uint64) bool {
	if len(r.GetCovered()) == 0 {
		return r.GetFirstSeq() <= seq && seq <= r.GetThroughSeq()
	}
	for _, c := range r.GetCovered() {
		if c.GetFirst() <= seq && seq <= c.GetLast() {
			return true
		}
	}
	return false
}

func runTrace(ctx context.Context, w io.Writer, c traceConfig, arg string) error {
	ctx, s, done, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	rep, err := trace(ctx, s, c.Cluster, arg)
	if err != nil {
		return err
	}
	return emit(w, c.Output, rep, func(tw *tabwriter.Writer) {
		ch := rep.Change
		fmt.Fprintf(tw, "change %d  %s %s  resourceVersion %s  stored %s\n", ch.Seq, ch.Op,
			objectName(ch.Cluster, ch.Kind, ch.Namespace, ch.Name), ch.ResourceVersion, ch.Stored.Format(time.RFC3339Nano))
		for _, d := range ch.Diff {
			fmt.Fprintf(tw, "    %s\n", d)
		}
		fmt.Fprintln(tw)
		if len(rep.Pushes) == 0 {
			fmt.Fprintln(tw, "no PushRequest covers it (yet, or PUSHES no longer holds it)")
		} else {
			fmt.Fprintln(tw, "PUSH\tEMITTED\tFULL\tTHROUGH\tCOVERED\tMERGED\tKEYS\tREASONS")
			for _, p := range rep.Pushes {
				fmt.Fprintf(tw, "%d\t%s\t%t\t%d\t%s\t%d\t%d\t%s\n", p.Seq, p.Emitted.Format(time.RFC3339Nano), p.Full,
					p.ThroughSeq, strings.Join(p.Covered, ","), p.MergedEvents, p.ConfigKeys, p.Reasons)
			}
		}
		tw.Flush()
		fmt.Fprintln(tw)
		if len(rep.Deliveries) == 0 {
			fmt.Fprintln(tw, "no connection was sent a response reflecting it")
			return
		}
		fmt.Fprintln(tw, "NODE\tFRONTEND\tCONN\tTYPE\tVERSION\tSENT\tAFTER\tRESULT\tERROR")
		for _, d := range rep.Deliveries {
			res := d.Result
			if d.Initial {
				res += " (initial)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Node, d.Frontend, d.Conn, d.Type, short(d.Version),
				d.Sent.Format(time.RFC3339Nano), d.Sent.Sub(ch.Stored).Round(time.Millisecond), res, d.Error)
		}
	})
}

func trace(ctx context.Context, s *session, cluster, arg string) (*traceReport, error) {
	changes, err := s.js.Stream(ctx, s.names.ChangesStream())
	if err != nil {
		return nil, fmt.Errorf("changes stream: %w", err)
	}
	seq, err := traceSeq(ctx, changes, s.names, cluster, arg)
	if err != nil {
		return nil, err
	}
	raw, err := changes.GetMsg(ctx, seq)
	if err != nil {
		return nil, fmt.Errorf("change %d: %w", seq, err)
	}
	rep := &traceReport{Pushes: []tracedPush{}, Deliveries: []tracedDeliv{}}
	rep.Change = historyEntry{Seq: seq, Stored: raw.Time}
	rec := &pb.ChangeRecord{}
	if err := proto.Unmarshal(raw.Data, rec); err != nil {
		rep.Change.Error = fmt.Sprintf("undecodable record: %v", err)
	} else {
		ref := rec.GetRef()
		rep.Change.Observed = rec.GetObservedAt().AsTime()
		rep.Change.Cluster, rep.Change.Kind, rep.Change.Namespace, rep.Change.Name = rec.GetCluster(), kindOf(ref), ref.GetNamespace(), ref.GetName()
		rep.Change.Op, rep.Change.ResourceVersion, rep.Change.UID, rep.Change.Source = opName(rec.GetOp()), rec.GetResourceVersion(), rec.GetUid(), rec.GetSource()
	}

	pushes, err := s.js.Stream(ctx, s.names.PushesStream())
	if err != nil {
		return nil, fmt.Errorf("pushes stream: %w", err)
	}
	err = scanStream(ctx, pushes, scanOptions{}, func(msg jetstream.Msg, md *jetstream.MsgMetadata) error {
		r := &pb.PushRequest{}
		if proto.Unmarshal(msg.Data(), r) != nil || !covers(r, seq) {
			return nil
		}
		p := tracedPush{Seq: md.Sequence.Stream, Emitted: r.GetEmittedAt().AsTime(), Full: r.GetFull(), ThroughSeq: r.GetThroughSeq(),
			MergedEvents: r.GetMergedEvents(), ConfigKeys: len(r.GetConfigKeys()), Covered: []string{}}
		for _, c := range r.GetCovered() {
			if c.GetFirst() == c.GetLast() {
				p.Covered = append(p.Covered, strconv.FormatUint(c.GetFirst(), 10))
			} else {
				p.Covered = append(p.Covered, fmt.Sprintf("%d-%d", c.GetFirst(), c.GetLast()))
			}
		}
		var reasons []string
		for k, v := range r.GetReasons() {
			reasons = append(reasons, fmt.Sprintf("%s:%d", k, v))
		}
		sort.Strings(reasons)
		p.Reasons = strings.Join(reasons, ",")
		rep.Pushes = append(rep.Pushes, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read pushes: %w", err)
	}

	ds, err := readDeliveries(ctx, s, nil)
	if err != nil {
		return nil, err
	}
	type connType struct{ fe, conn, typ string }
	seen := map[connType]bool{} // had a response of the type before the change
	found := map[connType]int{} // index in rep.Deliveries
	for _, d := range ds {
		r := d.Rec
		k := connType{r.GetFrontend(), r.GetConnId(), r.GetTypeUrl()}
		i, done := found[k]
		switch r.GetKind() {
		case pb.DeliveryRecord_RESPONSE:
			if done {
				continue
			}
			if r.GetThroughSeq() < seq {
				seen[k] = true
				continue
			}
			found[k] = len(rep.Deliveries)
			rep.Deliveries = append(rep.Deliveries, tracedDeliv{Frontend: r.GetFrontend(), Conn: r.GetConnId(), Node: r.GetNodeId(),
				Type: shortOf(r.GetTypeUrl()), Version: r.GetVersion(), Nonce: r.GetNonce(), ThroughSeq: r.GetThroughSeq(),
				Sent: r.GetAt().AsTime(), Initial: !seen[k], Result: "PENDING"})
		case pb.DeliveryRecord_ACK, pb.DeliveryRecord_NACK:
			if !done {
				continue
			}
			td := &rep.Deliveries[i]
			if td.Result != "PENDING" || r.GetNonce() != td.Nonce {
				continue
			}
			td.Result, td.Answered, td.Error = kindName(r.GetKind()), r.GetAt().AsTime(), r.GetError()
		}
	}
	return rep, nil
}
