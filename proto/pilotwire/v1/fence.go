package pilotwirev1

import "sync"

// OrderFence is the frontend's side of the pusher's fencing rule: it keeps
// the newest lease revision seen from each pusher shard and admits a
// PushOrderBatch only if its revision is not older. Every new holder of a
// shard's lease has a higher revision than any before it, so once a
// frontend has seen the successor's orders, a paused or late ex-holder's
// orders are dropped, never applied after them. A batch with revision 0
// (a sender that does not fence) is always admitted.
//
// The zero value is ready to use; it is safe for concurrent use.
type OrderFence struct {
	mu     sync.Mutex
	newest map[string]uint64 // shard -> newest lease revision seen
}

// Admit reports whether b may be applied, and records its revision.
func (f *OrderFence) Admit(b *PushOrderBatch) bool {
	rev := b.GetLeaseRevision()
	if rev == 0 {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.newest == nil {
		f.newest = make(map[string]uint64)
	}
	if rev < f.newest[b.GetShard()] {
		return false
	}
	f.newest[b.GetShard()] = rev
	return true
}
