package model

// podUsers counts, per pod, the services whose EndpointSlices name it,
// and how many times. Nearly every pod backs one service, so that one is
// held in the entry itself: indexing a slice's endpoints allocates no map
// per pod.
type podUsers map[podKey]podUse

type podUse struct {
	sk   serviceKey
	n    int                // times sk names the pod; 0: sk unused
	more map[serviceKey]int // the other services, if any
}

// add adds delta to the times sk names pk, forgetting counts at or below 0.
func (m podUsers) add(pk podKey, sk serviceKey, delta int) {
	u := m[pk]
	switch {
	case u.n > 0 && u.sk == sk, u.n == 0 && u.more[sk] == 0:
		u.sk, u.n = sk, u.n+delta
		if u.n <= 0 {
			u.sk, u.n = serviceKey{}, 0
		}
	default:
		if u.more == nil {
			u.more = make(map[serviceKey]int)
		}
		if u.more[sk] += delta; u.more[sk] <= 0 {
			delete(u.more, sk)
		}
		if len(u.more) == 0 {
			u.more = nil
		}
	}
	if u.n == 0 && u.more == nil {
		delete(m, pk)
		return
	}
	m[pk] = u
}

// each calls fn with every service that names pk.
func (m podUsers) each(pk podKey, fn func(serviceKey)) {
	u := m[pk]
	if u.n > 0 {
		fn(u.sk)
	}
	for sk := range u.more {
		fn(sk)
	}
}
