// Package lease elects one active instance among several (active/standby)
// with a key in a JetStream KV bucket: created or taken over by
// compare-and-set, renewed by compare-and-set, and judged expired by the
// standby's own clock (no revision change for TTL), so clock skew between
// machines does not matter. A holder that stood by because its renewals
// failed (the bucket without a leader) takes its lease back as soon as the
// bucket answers, if the entry is still the revision it wrote: nobody took
// it meanwhile, and it runs no work. A process started again under the id
// that holds the lease (a container restarted in its pod) takes it at its
// first campaign without waiting out the TTL, as client-go's leader
// election does; the write raises the revision, so anything the earlier
// process still sends is fenced.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultTTL is the lease TTL when none is set.
const DefaultTTL = 3 * time.Second

// Elector runs work only while it holds the lease.
type Elector struct {
	// KV is the lease bucket; Key names the lease (one per role and shard).
	KV  jetstream.KeyValue
	Key string
	// Holder identifies this instance: no two live processes may share it.
	// A process that finds its own Holder on the lease at its first
	// campaign is that holder restarted, and takes the lease at once.
	Holder string
	// TTL: a lease not renewed for this long may be taken over. Renewal
	// happens every TTL/3. Default DefaultTTL.
	TTL time.Duration
	Log *slog.Logger
	// Leader, if set, is 1 while this instance holds the lease.
	Leader prometheus.Gauge
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// Waiting, if set, hears of each campaign round that finds the lease
	// held by another instance (holder is the lease's value), so that a
	// standby can say so (readiness, status).
	Waiting func(holder string)

	// ownRev is the revision of the lease entry this elector last wrote
	// while active, kept after it stood by for failed renewals (0: none).
	// Owned by Run's goroutine.
	ownRev uint64
	// campaigned: a campaign round of this elector has read the lease.
	// Owned by Run's goroutine.
	campaigned bool
}

// ErrLost is the cause of the work context's cancellation when the lease
// was lost.
var ErrLost = errors.New("lease lost")

type revisionKey struct{}

// Revision is the revision at which the holder running the work acquired
// the lease: a fencing token. Every later holder acquires at a higher
// revision (the bucket's revisions only grow), so a reader that drops
// writes older than the newest token it has seen makes a paused or late
// ex-holder harmless. It is 0 outside a work context.
func Revision(ctx context.Context) uint64 {
	rev, _ := ctx.Value(revisionKey{}).(uint64)
	return rev
}

func (e *Elector) defaults() {
	if e.TTL <= 0 {
		e.TTL = DefaultTTL
	}
	if e.Now == nil {
		e.Now = time.Now
	}
}

// Run campaigns until ctx ends. Each time the lease is won it calls work
// with a context cancelled (cause ErrLost) when the lease is lost; it waits
// for work to return before campaigning again. On ctx end it releases the
// lease so a standby takes over at once. An error from work ends Run.
func (e *Elector) Run(ctx context.Context, work func(ctx context.Context) error) error {
	e.defaults()
	var observedRev uint64
	var observedAt time.Time
	tick := time.NewTicker(e.TTL / 3)
	defer tick.Stop()
	for {
		sent := e.Now() // before the write that may win: the deadline runs from here
		rev, won, err := e.tryAcquire(ctx, &observedRev, &observedAt)
		if err != nil && ctx.Err() == nil {
			e.Log.Warn("lease campaign", "key", e.Key, "err", err)
		}
		if err == nil {
			e.campaigned = true
		}
		if won {
			if err := e.lead(ctx, rev, sent, tick, work); err != nil {
				return err
			}
			observedRev, observedAt = 0, time.Time{}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (e *Elector) tryAcquire(ctx context.Context, observedRev *uint64, observedAt *time.Time) (_ uint64, won bool, _ error) {
	rev, err := e.KV.Create(ctx, e.Key, []byte(e.Holder))
	if err == nil {
		return rev, true, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, false, fmt.Errorf("create lease %s: %w", e.Key, err)
	}
	entry, err := e.KV.Get(ctx, e.Key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, false, nil // released meanwhile: next round creates it
	}
	if err != nil {
		return 0, false, fmt.Errorf("read lease %s: %w", e.Key, err)
	}
	if e.Waiting != nil {
		defer func() {
			if !won {
				e.Waiting(string(entry.Value()))
			}
		}()
	}
	if own := e.ownRev; own != 0 {
		e.ownRev = 0
		if entry.Revision() == own && string(entry.Value()) == e.Holder {
			// Still the entry it wrote before it stood by for failed
			// renewals: nobody has taken the lease since, and it runs no
			// work, so it may take it back without waiting out the TTL.
			// The compare-and-set fails if a standby takes it first.
			rev, err := e.KV.Update(ctx, e.Key, []byte(e.Holder), own)
			if err == nil {
				e.Log.Info("lease taken back after failed renewals", "key", e.Key)
				return rev, true, nil
			}
			if !isConflict(err) {
				e.ownRev = own // the bucket may still be failing: try again next round
				return 0, false, fmt.Errorf("take back lease %s: %w", e.Key, err)
			}
		}
	}
	if !e.campaigned && string(entry.Value()) == e.Holder {
		// This process's first look finds its own id: the holder was this
		// instance before a restart (kill, crash, container restart) and
		// runs no work now. The compare-and-set fails if anyone wrote the
		// lease since it was read.
		rev, err := e.KV.Update(ctx, e.Key, []byte(e.Holder), entry.Revision())
		if err == nil {
			e.Log.Info("lease held under this instance's id before a restart: taken at once", "key", e.Key)
			return rev, true, nil
		}
		if !isConflict(err) {
			return 0, false, fmt.Errorf("take over own lease %s after a restart: %w", e.Key, err)
		}
	}
	now := e.Now()
	if entry.Revision() != *observedRev {
		*observedRev, *observedAt = entry.Revision(), now
		return 0, false, nil
	}
	if now.Sub(*observedAt) < e.TTL {
		return 0, false, nil
	}
	rev, err = e.KV.Update(ctx, e.Key, []byte(e.Holder), entry.Revision())
	if err != nil {
		return 0, false, nil // someone else renewed or took it
	}
	won = true
	e.Log.Info("lease taken over from a silent holder", "key", e.Key, "previous", string(entry.Value()))
	return rev, true, nil
}

// lead runs work while renewing the lease.
//
// The holder's deadline is 2/3 TTL after it sent the write of its last
// successful renewal (or of the acquisition), never after the reply came:
// the write may have landed, and a standby started counting, any time
// after the send. A standby takes over no earlier than TTL after it saw
// that write, so the holder stops at least TTL/3 before. The deadline is
// a timer of its own and bounds every renewal's wait, so hung renewals
// cannot stretch it.
func (e *Elector) lead(ctx context.Context, rev uint64, sent time.Time, tick *time.Ticker, work func(context.Context) error) error {
	e.Log.Info("lease acquired: active", "key", e.Key, "holder", e.Holder)
	if e.Leader != nil {
		e.Leader.Set(1)
		defer e.Leader.Set(0)
	}
	wctx, cancel := context.WithCancelCause(context.WithValue(ctx, revisionKey{}, rev))
	defer cancel(nil)
	var wg sync.WaitGroup
	workErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		workErr <- work(wctx)
	}()
	validFor := e.TTL * 2 / 3
	validUntil := sent.Add(validFor)
	expire := time.NewTimer(validUntil.Sub(e.Now()))
	defer expire.Stop()
	standBy := func(msg string, args ...any) error {
		e.Log.Warn(msg, append([]any{"key", e.Key}, args...)...)
		cancel(ErrLost)
		wg.Wait()
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			cancel(ctx.Err())
			wg.Wait()
			e.release(rev)
			return nil
		case err := <-workErr:
			e.release(rev)
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		case <-expire.C:
			// Cannot renew in time: a standby may take over soon, so stop
			// before it does.
			e.ownRev = rev
			return standBy("lease not renewed in time: standing by")
		case <-tick.C:
		}
		sent := e.Now()
		rctx, rcancel := context.WithTimeout(ctx, min(e.TTL/3, validUntil.Sub(sent)))
		nrev, err := e.KV.Update(rctx, e.Key, []byte(e.Holder), rev)
		rcancel()
		switch {
		case err == nil:
			rev, validUntil = nrev, sent.Add(validFor)
			expire.Reset(validUntil.Sub(e.Now()))
		case isConflict(err):
			return standBy("lease lost to another holder: standing by")
		case !e.Now().Before(validUntil):
			e.ownRev = rev
			return standBy("lease not renewed in time: standing by", "err", err)
		default:
			e.Log.Warn("lease renewal failed, retrying", "key", e.Key, "err", err)
		}
	}
}

func (e *Elector) release(rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := e.KV.Delete(ctx, e.Key, jetstream.LastRevision(rev)); err != nil {
		e.Log.Warn("release lease", "key", e.Key, "err", err)
		return
	}
	e.Log.Info("lease released", "key", e.Key)
}

func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound)
}
