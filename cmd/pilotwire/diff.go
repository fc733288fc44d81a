package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

type diffConfig struct {
	connConfig
	proxyFlags
	From, To string
	Types    []string
}

func newDiffCmd() *cobra.Command {
	var c diffConfig
	cmd := &cobra.Command{
		Use:   "diff --proxy NODE_ID --from SEQ|TIME --to SEQ|TIME",
		Short: "Show what changed in a proxy's config between two points of the history, resource by resource",
		Long: `diff renders the proxy's config at --from and at --to (as render does) and
lists, per type, the resources added, removed and changed, each changed one
with a unified diff of its JSON.`,
		Example: `  pilotwire diff --proxy sidecar~10.244.0.7~client-0.default~default.svc.cluster.local --from 41 --to 42
  pilotwire diff --proxy sidecar~10.244.0.7~client-0.default~default.svc.cluster.local --from 1h --to now --type cds`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDiff(cmd.Context(), os.Stdout, c) },
	}
	addConnFlags(cmd, &c.connConfig)
	c.proxyFlags.add(cmd, true)
	cmd.Flags().StringVar(&c.From, "from", "", "first point: SEQ, an RFC 3339 time or a duration ago (required)")
	cmd.Flags().StringVar(&c.To, "to", "", "second point (default: now)")
	cmd.Flags().StringSliceVar(&c.Types, "type", nil, "types to compare: cds, eds, lds, rds (default: all)")
	return cmd
}

// resourceChange is one resource that differs between two renderings.
type resourceChange struct {
	Type        string `json:"type"`
	Name        string `json:"name"`
	Change      string `json:"change"` // added, removed, changed
	FromVersion string `json:"fromVersion,omitempty"`
	ToVersion   string `json:"toVersion,omitempty"`
	Diff        string `json:"diff,omitempty"`
}

// configDiff is the whole difference.
type configDiff struct {
	Proxy   string           `json:"proxy"`
	FromSeq uint64           `json:"fromSeq"`
	ToSeq   uint64           `json:"toSeq"`
	Types   []typeVersions   `json:"types"`
	Changes []resourceChange `json:"changes"`
}

type typeVersions struct {
	Type        string `json:"type"`
	FromVersion string `json:"fromVersion"`
	ToVersion   string `json:"toVersion"`
}

// diffRenderings compares a and b resource by resource (both rendered for
// the same types, in the same order).
func diffRenderings(a, b *rendering) (*configDiff, error) {
	d := &configDiff{Proxy: a.Proxy, FromSeq: a.Seq, ToSeq: b.Seq, Changes: []resourceChange{}}
	from, to := fmt.Sprintf("seq %d", a.Seq), fmt.Sprintf("seq %d", b.Seq)
	for i, ta := range a.Types {
		tb := b.Types[i]
		d.Types = append(d.Types, typeVersions{Type: ta.Type, FromVersion: ta.Version, ToVersion: tb.Version})
		old := map[string]renderedResource{}
		for _, r := range ta.Resources {
			old[r.Name] = r
		}
		cur := map[string]renderedResource{}
		for _, r := range tb.Resources {
			cur[r.Name] = r
		}
		var names []string
		for n := range old {
			names = append(names, n)
		}
		for n := range cur {
			if _, ok := old[n]; !ok {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		for _, n := range names {
			ra, ina := old[n]
			rb, inb := cur[n]
			ch := resourceChange{Type: ta.Type, Name: n, FromVersion: ra.Version, ToVersion: rb.Version}
			var ja, jb []byte
			var err error
			if ina {
				if ja, err = resourceJSON(ra.any); err != nil {
					return nil, err
				}
			}
			if inb {
				if jb, err = resourceJSON(rb.any); err != nil {
					return nil, err
				}
			}
			switch {
			case ina && inb && ra.Version == rb.Version:
				continue
			case ina && inb:
				ch.Change = "changed"
			case inb:
				ch.Change = "added"
			default:
				ch.Change = "removed"
			}
			ch.Diff = unifiedDiff(from+" "+n, to+" "+n, string(ja), string(jb), 3)
			d.Changes = append(d.Changes, ch)
		}
	}
	return d, nil
}

func runDiff(ctx context.Context, w io.Writer, c diffConfig) error {
	if c.From == "" {
		return fmt.Errorf("--from is required")
	}
	r, err := c.resolve()
	if err != nil {
		return err
	}
	types, err := parseTypes(c.Types)
	if err != nil {
		return err
	}
	now := time.Now()
	from, err := parsePoint(c.From, now)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	to, err := parsePoint(c.To, now)
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	ctx, s, done, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	a, err := renderAt(ctx, s, r, from, types)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	b, err := renderAt(ctx, s, r, to, types)
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	d, err := diffRenderings(a, b)
	if err != nil {
		return err
	}
	return emit(w, c.Output, d, func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "proxy %s: seq %d -> seq %d\n", d.Proxy, d.FromSeq, d.ToSeq)
		for _, t := range d.Types {
			mark := "unchanged"
			if t.FromVersion != t.ToVersion {
				mark = t.FromVersion + " -> " + t.ToVersion
			}
			fmt.Fprintf(tw, "%s\tversion %s\n", t.Type, mark)
		}
		tw.Flush()
		if len(d.Changes) == 0 {
			fmt.Fprintln(tw, "no resource changed")
		}
		for _, ch := range d.Changes {
			fmt.Fprintf(tw, "\n%s %s %s\n%s", ch.Change, ch.Type, ch.Name, ch.Diff)
		}
	})
}
