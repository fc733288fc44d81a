// Command pusher runs the pilotwire pusher.
package main

import (
	"context"
	"time"

	"github.com/pilotwire/pilotwire/pkg/pushqueue"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/pusher"
)

func main() {
	var cfg pusher.Config
	cmd := svc.Command("pusher", "pilotwire pusher: fans PushRequests out to connections on the ADS frontends", "127.0.0.1:9093",
		&cfg.Common, nil, func(ctx context.Context, d svc.Deps) error { return pusher.Run(ctx, cfg, d) })
	fs := cmd.Flags()
	fs.IntVar(&cfg.Throttle, "push-throttle", svc.EnvInt("PILOT_PUSH_THROTTLE", pushqueue.DefaultThrottle()), "most connections pushed at once (env PILOT_PUSH_THROTTLE)")
	fs.StringVar(&cfg.Shard, "shard", svc.EnvString("PILOTWIRE_PUSHER_SHARD", "0"), "pusher shard: names the durable consumer (env PILOTWIRE_PUSHER_SHARD)")
	fs.DurationVar(&cfg.PushTimeout, "push-timeout", svc.EnvDuration("PILOTWIRE_PUSH_TIMEOUT", 30*time.Second), "a push order without a done report after this long is re-queued once (env PILOTWIRE_PUSH_TIMEOUT)")
	fs.DurationVar(&cfg.FrontendTimeout, "frontend-timeout", svc.EnvDuration("PILOTWIRE_FRONTEND_TIMEOUT", 6*time.Second), "a frontend without a heartbeat for this long is forgotten with its connections (env PILOTWIRE_FRONTEND_TIMEOUT)")
	fs.StringVar(&cfg.ID, "id", svc.EnvString("PILOTWIRE_INSTANCE_ID", ""), "unique id of this instance in the lease (env PILOTWIRE_INSTANCE_ID; default pusher-<hostname>-<random>)")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", svc.EnvDuration("PILOTWIRE_LEASE_TTL", 3*time.Second), "a standby takes over when the active instance has not renewed its lease for this long (env PILOTWIRE_LEASE_TTL)")
	svc.Main(cmd)
}
