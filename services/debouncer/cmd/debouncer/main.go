// Command debouncer runs the pilotwire debouncer.
package main

import (
	"context"
	"time"

	"github.com/pilotwire/pilotwire/pkg/debounce"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/debouncer"
)

func main() {
	var cfg debouncer.Config
	cmd := svc.Command("debouncer", "pilotwire debouncer: merges change records into PushRequests", "127.0.0.1:9092",
		&cfg.Common, nil, func(ctx context.Context, d svc.Deps) error { return debouncer.Run(ctx, cfg, d) })
	fs := cmd.Flags()
	fs.DurationVar(&cfg.Debounce.DebounceAfter, "debounce-after", svc.EnvDuration("PILOT_DEBOUNCE_AFTER", debounce.DefaultDebounceAfter), "quiet window: emit when no change arrived for this long (env PILOT_DEBOUNCE_AFTER)")
	fs.DurationVar(&cfg.Debounce.DebounceMax, "debounce-max", svc.EnvDuration("PILOT_DEBOUNCE_MAX", debounce.DefaultDebounceMax), "emit at the latest this long after the first merged change (env PILOT_DEBOUNCE_MAX)")
	fs.BoolVar(&cfg.Debounce.EnableEDSDebounce, "enable-eds-debounce", svc.EnvBool("PILOT_ENABLE_EDS_DEBOUNCE", debounce.DefaultEnableEDSDebounce), "debounce endpoint-only changes too (env PILOT_ENABLE_EDS_DEBOUNCE)")
	fs.IntVar(&cfg.MaxAckPending, "max-ack-pending", svc.EnvInt("PILOTWIRE_DEBOUNCE_MAX_ACK_PENDING", 200000), "change records held un-acknowledged while merged (env PILOTWIRE_DEBOUNCE_MAX_ACK_PENDING)")
	fs.StringVar(&cfg.ID, "id", svc.EnvString("PILOTWIRE_INSTANCE_ID", ""), "unique id of this instance in the lease (env PILOTWIRE_INSTANCE_ID; default debouncer-<hostname>-<random>)")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", svc.EnvDuration("PILOTWIRE_LEASE_TTL", 3*time.Second), "a standby takes over when the active instance has not renewed its lease for this long (env PILOTWIRE_LEASE_TTL)")
	svc.Main(cmd)
}
