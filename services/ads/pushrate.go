package ads

import (
	"sync"
	"time"
)

// pushMeter measures how many push orders this frontend completes per
// second of being busy with them (some order handed over and not yet
// done). Idle time between pushes does not count, so the rate is what the
// frontend can serve, not what it was asked for. The heartbeat reports it
// (FrontendInfo.push_rate) and the pusher sizes this frontend's throttle
// from it.
type pushMeter struct {
	mu sync.Mutex
	// guarded by mu
	outstanding int
	busySince   time.Time     // when outstanding last went above 0
	busy        time.Duration // busy time since the last sample
	completed   int           // orders done since the last sample
	rate        float64       // smoothed orders per busy second; 0: none measured
}

// Minimums for a sample to move the rate: fewer orders or less busy time
// say more about scheduling noise than about capacity.
const (
	meterMinOrders = 50
	meterMinBusy   = time.Millisecond
)

// started notes n orders handed over at now.
func (m *pushMeter) started(n int, now time.Time) {
	if n <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.outstanding == 0 {
		m.busySince = now
	}
	m.outstanding += n
}

// finished notes one order done at now.
func (m *pushMeter) finished(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.outstanding == 0 {
		return // an order not counted in (a test's, or from before a reset)
	}
	m.completed++
	m.outstanding--
	if m.outstanding == 0 {
		m.busy += now.Sub(m.busySince)
	}
}

// sample folds what was measured since the last sample into the rate (a
// moving average, half the weight on the new window) and returns the rate.
func (m *pushMeter) sample(now time.Time) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	busy := m.busy
	if m.outstanding > 0 {
		busy += now.Sub(m.busySince)
	}
	if m.completed < meterMinOrders || busy < meterMinBusy {
		return m.rate // keep gathering
	}
	w := float64(m.completed) / busy.Seconds()
	if m.rate == 0 {
		m.rate = w
	} else {
		m.rate = (m.rate + w) / 2
	}
	m.completed, m.busy = 0, 0
	if m.outstanding > 0 {
		m.busySince = now
	}
	return m.rate
}
