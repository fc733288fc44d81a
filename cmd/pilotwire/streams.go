package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/pkg/bus"
)

// streamsConfig is `pilotwire streams check|apply`: the connection, and
// for apply the replica count (0: keep each stream's own).
type streamsConfig struct {
	connConfig
	// Replicas of every stream and bucket apply creates or changes
	// (--replicas; default 0: existing ones keep theirs, missing ones get
	// 1).
	Replicas int
}

func newStreamsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "streams",
		Short: "Check or apply the config of the mesh's streams, buckets and object store",
		Long: `Every stream and bucket of a mesh is declared in one place (pkg/bus). A
service creates what is missing at start but never changes an existing
stream: it logs each field that differs and sets pilotwire_stream_drift.
"streams check" lists the differences; "streams apply" makes them as declared.`,
	}
	var check streamsConfig
	checkCmd := &cobra.Command{
		Use:   "check",
		Short: "List the streams, buckets and object store that are missing or differ from their declaration (exit 1 if any)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStreams(cmd.Context(), os.Stdout, check, false)
		},
	}
	addConnFlags(checkCmd, &check.connConfig)
	checkCmd.Flags().IntVar(&check.Replicas, "replicas", 0, "replicas to check against (default: each stream's own)")
	var apply streamsConfig
	applyCmd := &cobra.Command{
		Use:   "apply",
		Short: "Create the missing streams, buckets and object store and change those that differ from their declaration",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStreams(cmd.Context(), os.Stdout, apply, true)
		},
	}
	addConnFlags(applyCmd, &apply.connConfig)
	applyCmd.Flags().IntVar(&apply.Replicas, "replicas", 0, "replicas of every stream and bucket (default: existing ones keep theirs, missing ones get 1)")
	cmd.AddCommand(checkCmd, applyCmd)
	return cmd
}

// errDrift makes `streams check` exit 1.
var errDrift = errors.New("streams or buckets differ from their declaration (pilotwire streams apply changes them)")

func runStreams(ctx context.Context, w io.Writer, c streamsConfig, apply bool) error {
	ctx, s, done, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	statuses, err := applyStreams(ctx, s, c.Replicas, apply)
	if err != nil {
		return err
	}
	if err := emit(w, c.Output, statuses, func(tw *tabwriter.Writer) {
		verb := "differs"
		if apply {
			verb = "changed"
		}
		fmt.Fprintln(tw, "KIND\tNAME\tSTATE\tDRIFT")
		for _, st := range statuses {
			state, drift := "ok", ""
			switch {
			case st.Missing && apply:
				state = "created"
			case st.Missing:
				state = "missing"
			case len(st.Drift) > 0:
				state = verb
				parts := make([]string, len(st.Drift))
				for i, d := range st.Drift {
					parts[i] = d.String()
				}
				drift = strings.Join(parts, "; ")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", st.Kind, st.Name, state, drift)
		}
	}); err != nil {
		return err
	}
	if !apply {
		for _, st := range statuses {
			if !st.OK() {
				return errDrift
			}
		}
	}
	return nil
}

// applyStreams checks (or applies) every declared stream and bucket of the
// session's mesh; replicas 0 means each existing stream's own.
func applyStreams(ctx context.Context, s *session, replicas int, apply bool) ([]bus.Status, error) {
	decl := s.names.Declared(bus.StreamOptions{Replicas: replicas})
	if apply {
		return decl.Apply(ctx, s.js, replicas <= 0)
	}
	return decl.Check(ctx, s.js, replicas <= 0)
}
