package faults

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pilotwire/pilotwire/services/pusher"
)

// WriteTable writes the figures per fault as a Markdown table.
func WriteTable(w io.Writer, r *Result) {
	o := r.Options
	fmt.Fprintf(w, "%d proxies on 3 frontends, mesh %s (+1 service every %d changes), %d changes at %.0f/s, lease TTL %s, 3-node JetStream cluster, replicas 3; startup to all proxies in sync: %s\n\n",
		o.Proxies, o.Mesh, o.AddEvery, o.Changes, o.Rate, o.LeaseTTL, r.Startup.Round(time.Millisecond))
	fmt.Fprintln(w, "| fault | changes | converged | after fault end | after fault start | target | records lost / dup / reordered | versions skipped / coalesced | pushes: requests, uncovered / dup / reordered | orders older / repeated / fenced | debouncer fenced | lost pushes | note |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, row := range r.Rows {
		target := "ok"
		switch {
		case row.Matched < row.Total:
			target = "NOT CONVERGED"
		case row.Converge > o.Target:
			target = "MISS"
		}
		if !row.OK() && target == "ok" {
			target = "FAIL"
		}
		rc := row.Records
		note := row.Note
		if row.Err != "" {
			note = strings.TrimSpace(note + " error: " + row.Err)
		}
		fmt.Fprintf(w, "| %s | %d | %d/%d | %s | %s | %s | %d / %d / %d | %d / %d | %d, %d / %d / %d | %g / %g / %g | %g | %s | %s |\n",
			row.Fault, row.Changes, row.Matched, row.Total, secs(row.Converge), secs(row.FromFault), target,
			rc.Lost, rc.Duplicated, rc.Reordered+rc.Unknown, rc.Skipped, rc.Coalesced,
			row.Pushes.Requests, row.Pushes.Uncovered, row.Pushes.Duplicated, row.Pushes.Reordered,
			row.Older, row.Repeated, row.Fenced, row.DebounceFenced, lostPushes(row), note)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "\n- %s", n)
	}
	fmt.Fprintln(w)
}

// lostPushes is the row's lost pushes with their reasons, "23 (timeout 20,
// frontend_reconnected 3)", so that a reader sees which path lost them.
func lostPushes(row Row) string {
	var by []string
	for _, r := range pusher.LostReasons {
		if n := row.LostBy[r]; n > 0 {
			by = append(by, fmt.Sprintf("%s %g", r, n))
		}
	}
	if len(by) == 0 {
		return fmt.Sprintf("%g", row.LostPushes)
	}
	return fmt.Sprintf("%g (%s)", row.LostPushes, strings.Join(by, ", "))
}

func secs(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// Failed lists the rows that miss a correctness target, and, if strict,
// the time target too.
func Failed(r *Result, strict bool) []string {
	var out []string
	for _, row := range r.Rows {
		if !row.OK() || (strict && row.Converge > r.Options.Target) {
			out = append(out, row.Fault)
		}
	}
	return out
}
