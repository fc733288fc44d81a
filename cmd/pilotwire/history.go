package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

type historyConfig struct {
	NATSURL   string
	Prefix    string
	Cluster   string
	Namespace string
	Objects   bool
	Timeout   time.Duration
}

func newHistoryCmd() *cobra.Command {
	var c historyConfig
	cmd := &cobra.Command{
		Use:   "history KIND[.GROUP] NAME",
		Short: "Print the change history of one object from the CHANGES stream",
		Example: `  pilotwire history Service -n default echo
  pilotwire history EndpointSlice.discovery.k8s.io -n default echo-abc --objects`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runHistory(cmd.Context(), os.Stdout, c, args[0], args[1])
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&c.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	fs.StringVar(&c.Prefix, "prefix", "pw", "subject prefix")
	fs.StringVar(&c.Cluster, "cluster", "Kubernetes", "cluster id")
	fs.StringVarP(&c.Namespace, "namespace", "n", "default", "namespace (empty for cluster-scoped kinds)")
	fs.BoolVar(&c.Objects, "objects", false, "print each recorded object as JSON")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Second, "give up after this long")
	return cmd
}

func runHistory(ctx context.Context, w io.Writer, c historyConfig, kind, name string) error {
	names, err := bus.NewNames(c.Prefix)
	if err != nil {
		return err
	}
	ref := &pb.ObjectRef{Kind: kind, Namespace: c.Namespace, Name: name}
	if k, g, ok := strings.Cut(kind, "."); ok {
		ref.Kind, ref.Group = k, g
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	nc, err := nats.Connect(c.NATSURL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", c.NATSURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream, err := js.Stream(ctx, names.ChangesStream())
	if err != nil {
		return fmt.Errorf("changes stream: %w", err)
	}
	subject := names.ChangeSubject(c.Cluster, ref)
	last, err := bus.LastMsg(ctx, stream, subject)
	if err != nil {
		return err
	}
	if last == nil {
		fmt.Fprintf(w, "no history for %s\n", subject)
		return nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%-8s %-30s %-7s %-24s %-38s %s\n", "SEQ", "OBSERVED", "OP", "RESOURCE_VERSION", "UID", "SOURCE")
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(c.Timeout))
		if err != nil {
			return fmt.Errorf("read history: %w", err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		rec := &pb.ChangeRecord{}
		if err := proto.Unmarshal(msg.Data(), rec); err != nil {
			fmt.Fprintf(w, "%-8d undecodable record: %v\n", md.Sequence.Stream, err)
		} else {
			fmt.Fprintf(w, "%-8d %-30s %-7s %-24s %-38s %s\n", md.Sequence.Stream,
				rec.GetObservedAt().AsTime().Format(time.RFC3339Nano), strings.TrimPrefix(rec.GetOp().String(), "OP_"),
				rec.GetResourceVersion(), rec.GetUid(), rec.GetSource())
			if c.Objects && len(rec.GetObject()) > 0 {
				var v any
				if json.Unmarshal(rec.GetObject(), &v) == nil {
					b, _ := json.MarshalIndent(v, "         ", "  ")
					fmt.Fprintf(w, "         %s\n", b)
				}
			}
		}
		if md.Sequence.Stream >= last.Sequence {
			return nil
		}
	}
}
