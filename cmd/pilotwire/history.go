package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

type historyConfig struct {
	connConfig
	// Filters; empty matches any. Kind is Kind or Kind.group; Namespace "_"
	// is cluster-scoped objects.
	Cluster, Kind, Namespace, Name string
	// Since and Until bound the records printed by when they were stored
	// (RFC 3339, or a duration before now).
	Since, Until string
	// Objects prints each recorded object as JSON.
	Objects bool
}

func newHistoryCmd() *cobra.Command {
	var c historyConfig
	cmd := &cobra.Command{
		Use:   "history [KIND[.GROUP] NAME]",
		Short: "Print change records from the CHANGES stream, with a short diff of each update",
		Long: `history prints the change records that match the filters, oldest first
(newest last), each with its op, resourceVersion and, for an update, a short
diff against the object's previous record.

The positional form "history KIND NAME" prints one object's history (its
namespace defaults to default and its cluster to Kubernetes).`,
		Example: `  pilotwire history --kind Service --namespace default
  pilotwire history --kind EndpointSlice.discovery.k8s.io --since 10m
  pilotwire history Service -n default echo
  pilotwire history EndpointSlice.discovery.k8s.io -n default echo-abc --objects`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 && len(args) != 2 {
				return fmt.Errorf("want no arguments (filters by flags) or KIND NAME, got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var kind, name string
			if len(args) == 2 {
				kind, name = args[0], args[1]
				if !cmd.Flags().Changed("namespace") {
					c.Namespace = "default"
				}
				if !cmd.Flags().Changed("cluster") {
					c.Cluster = "Kubernetes"
				}
			}
			return runHistory(cmd.Context(), os.Stdout, c, kind, name)
		},
	}
	addConnFlags(cmd, &c.connConfig)
	fs := cmd.Flags()
	fs.StringVar(&c.Cluster, "cluster", "", "cluster id (default: any; Kubernetes in the positional form)")
	fs.StringVar(&c.Kind, "kind", "", "kind, Kind or Kind.group (default: any)")
	fs.StringVarP(&c.Namespace, "namespace", "n", "", "namespace, _ for cluster-scoped objects (default: any; default in the positional form)")
	fs.StringVar(&c.Name, "name", "", "object name (default: any)")
	fs.StringVar(&c.Since, "since", "", "only records stored at or after this time (RFC 3339, or a duration ago: 10m)")
	fs.StringVar(&c.Until, "until", "", "only records stored at or before this time (RFC 3339, or a duration ago)")
	fs.BoolVar(&c.Objects, "objects", false, "print each recorded object as JSON")
	return cmd
}

// historyEntry is one change record as history prints it.
type historyEntry struct {
	Seq             uint64          `json:"seq"`
	Stored          time.Time       `json:"stored"`
	Observed        time.Time       `json:"observed"`
	Cluster         string          `json:"cluster"`
	Kind            string          `json:"kind"`
	Namespace       string          `json:"namespace,omitempty"`
	Name            string          `json:"name"`
	Op              string          `json:"op"`
	ResourceVersion string          `json:"resourceVersion"`
	UID             string          `json:"uid"`
	Source          string          `json:"source,omitempty"`
	Diff            []string        `json:"diff,omitempty"`
	Object          json.RawMessage `json:"object,omitempty"`
	Error           string          `json:"error,omitempty"`
}

// historyFilter is the subject filter of the flags: one token per field,
// * where a field is empty.
func historyFilter(names bus.Names, c historyConfig) string {
	tok := func(v string, esc func(string) string) string {
		if v == "" {
			return "*"
		}
		return esc(v)
	}
	kind := "*"
	if c.Kind != "" {
		ref := &pb.ObjectRef{Kind: c.Kind}
		if k, g, ok := strings.Cut(c.Kind, "."); ok {
			ref.Kind, ref.Group = k, g
		}
		kind = bus.EscapeToken(bus.KindToken(ref))
	}
	ns := tok(c.Namespace, func(s string) string {
		if s == "_" {
			return "_"
		}
		return bus.NamespaceToken(s)
	})
	return strings.Join([]string{names.Prefix, "changes", tok(c.Cluster, bus.EscapeToken), kind, ns, tok(c.Name, bus.EscapeToken)}, ".")
}

// runHistory prints the records matching c; kind and name, when set, are
// the positional form's and override c's.
func runHistory(ctx context.Context, w io.Writer, c historyConfig, kind, name string) error {
	if kind != "" {
		c.Kind, c.Name = kind, name
	}
	now := time.Now()
	var since, until time.Time
	var err error
	if c.Since != "" {
		if since, err = parseTime(c.Since, now); err != nil {
			return fmt.Errorf("--since: %w", err)
		}
	}
	if c.Until != "" {
		if until, err = parseTime(c.Until, now); err != nil {
			return fmt.Errorf("--until: %w", err)
		}
	}
	ctx, s, done, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	stream, err := s.js.Stream(ctx, s.names.ChangesStream())
	if err != nil {
		return fmt.Errorf("changes stream: %w", err)
	}
	filter := historyFilter(s.names, c)
	// Every matching record is read from the start, so that the first
	// update printed after --since is still diffed against its predecessor.
	prev := make(map[string][]byte) // subject -> object of its last record
	var out []historyEntry
	err = scanStream(ctx, stream, scanOptions{Filter: []string{filter}, Until: until}, func(msg jetstream.Msg, md *jetstream.MsgMetadata) error {
		e := historyEntry{Seq: md.Sequence.Stream, Stored: md.Timestamp}
		rec := &pb.ChangeRecord{}
		if err := proto.Unmarshal(msg.Data(), rec); err != nil {
			e.Error = fmt.Sprintf("undecodable record: %v", err)
		} else {
			ref := rec.GetRef()
			e.Observed = rec.GetObservedAt().AsTime()
			e.Cluster, e.Kind, e.Namespace, e.Name = rec.GetCluster(), kindOf(ref), ref.GetNamespace(), ref.GetName()
			e.Op, e.ResourceVersion, e.UID, e.Source = opName(rec.GetOp()), rec.GetResourceVersion(), rec.GetUid(), rec.GetSource()
			old, had := prev[msg.Subject()]
			if rec.GetOp() == pb.Op_OP_UPDATE && had {
				e.Diff = shortDiff(old, rec.GetObject(), 8)
			}
			if rec.GetOp() == pb.Op_OP_DELETE {
				delete(prev, msg.Subject())
			} else {
				prev[msg.Subject()] = rec.GetObject()
			}
			if c.Objects && len(rec.GetObject()) > 0 && json.Valid(rec.GetObject()) {
				e.Object = rec.GetObject()
			}
		}
		if !since.IsZero() && md.Timestamp.Before(since) {
			return nil
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read history: %w", err)
	}
	if len(out) == 0 && c.Output == "table" {
		fmt.Fprintf(w, "no history for %s\n", filter)
		return nil
	}
	return emit(w, c.Output, out, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "SEQ\tOBSERVED\tOP\tRESOURCE_VERSION\tOBJECT\tUID\tSOURCE")
		for _, e := range out {
			if e.Error != "" {
				fmt.Fprintf(tw, "%d\t%s\n", e.Seq, e.Error)
				continue
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.Observed.Format(time.RFC3339Nano), e.Op,
				e.ResourceVersion, objectName(e.Cluster, e.Kind, e.Namespace, e.Name), e.UID, e.Source)
			for _, d := range e.Diff { // trailing text under OP: aligned, widens nothing
				fmt.Fprintf(tw, "\t\t%s\n", d)
			}
			if len(e.Object) > 0 {
				var v any
				if json.Unmarshal(e.Object, &v) == nil {
					b, _ := json.MarshalIndent(v, "", "  ")
					for _, l := range strings.Split(string(b), "\n") {
						fmt.Fprintf(tw, "\t\t%s\n", l)
					}
				}
			}
		}
	})
}

// kindOf is Kind, or Kind.group outside the core group.
func kindOf(ref *pb.ObjectRef) string {
	if ref.GetGroup() == "" {
		return ref.GetKind()
	}
	return ref.GetKind() + "." + ref.GetGroup()
}

// objectName is cluster/kind/namespace/name, without an empty namespace.
func objectName(cluster, kind, ns, name string) string {
	if ns == "" {
		return cluster + "/" + kind + "/" + name
	}
	return cluster + "/" + kind + "/" + ns + "/" + name
}
