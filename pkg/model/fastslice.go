package model

import (
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// The fast EndpointSlice decoder reads in two steps: a pass over the
// bytes that notes where each kept value is (spans, in a pooled scratch),
// then what the model keeps (slimSlice) in three allocations: the kept
// strings of one slice share one backing string, its ports one array,
// its endpoints another. Most of encoding/json's cost there was the
// hundred-odd small allocations of a ten-endpoint slice.

// span is where a string value is in the input.
type span struct {
	lo, hi int32
	off    int32 // in the backing string; -1 for a constString
	set    bool
}

type portScratch struct {
	name, protocol, appProtocol span
	port                        int32
	hasPort                     bool
}

type endpointScratch struct {
	addrFirst, addrN int
	addrsSet         bool
	ready            int8 // 0 absent, 1 false, 2 true
	nodeName, zone   span
	ref              bool
	refKind          span
	refNamespace     span
	refName          span
}

type sliceScratch struct {
	labels       []span // key, value, key, value...
	labelsSet    bool
	addressType  span
	ports        []portScratch
	portsSet     bool
	endpoints    []endpointScratch
	endpointsSet bool
	addrs        []span
}

var sliceScratchPool = sync.Pool{New: func() any { return new(sliceScratch) }}

func (sc *sliceScratch) reset() {
	*sc = sliceScratch{labels: sc.labels[:0], ports: sc.ports[:0], endpoints: sc.endpoints[:0], addrs: sc.addrs[:0]}
}

// spanOf reads a plain string and returns where it is.
func (s *jscan) spanOf() (span, bool) {
	v, ok := s.plain()
	if !ok {
		return span{}, false
	}
	hi := s.i - 1
	return span{lo: int32(hi - len(v)), hi: int32(hi), set: true}, true
}

func fastEndpointSlice(raw []byte) (*entry, bool) {
	if len(raw) > 1<<30 {
		return nil, false
	}
	s := jscan{b: raw}
	sc := sliceScratchPool.Get().(*sliceScratch)
	defer sliceScratchPool.Put(sc)
	sc.reset()
	ok := s.fields(sliceTopFields, func(i int) bool {
		switch i {
		case 0:
			return s.fields(sliceMetaFields, func(int) bool { return s.spanMap(sc) })
		case 1:
			var ok bool
			sc.addressType, ok = s.spanOf()
			return ok
		case 2:
			sc.portsSet = true
			return s.array(func() bool {
				var p portScratch
				if !s.fields(slicePortFields, func(i int) bool { return s.portSpan(&p, i) }) {
					return false
				}
				sc.ports = append(sc.ports, p)
				return true
			})
		default:
			sc.endpointsSet = true
			return s.array(func() bool {
				e := endpointScratch{addrFirst: len(sc.addrs)}
				if !s.fields(endpointFields, func(i int) bool { return s.endpointSpan(sc, &e, i) }) {
					return false
				}
				sc.endpoints = append(sc.endpoints, e)
				return true
			})
		}
	})
	if !ok || !s.end() {
		return nil, false
	}
	return sc.build(raw), true
}

func (s *jscan) spanMap(sc *sliceScratch) bool {
	if !s.eat('{') {
		return false
	}
	sc.labelsSet = true
	sc.labels = sc.labels[:0] // a repeated labels key is refused before this
	if s.eat('}') {
		return true
	}
	for {
		k, ok := s.spanOf()
		if !ok || !s.eat(':') {
			return false
		}
		v, ok := s.spanOf()
		if !ok {
			return false
		}
		sc.labels = append(sc.labels, k, v)
		if s.eat(',') {
			continue
		}
		return s.eat('}')
	}
}

func (s *jscan) portSpan(p *portScratch, i int) bool {
	var ok bool
	switch i {
	case 0:
		p.name, ok = s.spanOf()
	case 1:
		p.protocol, ok = s.spanOf()
	case 2:
		p.port, ok = s.int32()
		p.hasPort = true
	default:
		p.appProtocol, ok = s.spanOf()
	}
	return ok
}

func (s *jscan) endpointSpan(sc *sliceScratch, e *endpointScratch, i int) bool {
	var ok bool
	switch i {
	case 0:
		e.addrsSet = true
		ok = s.array(func() bool {
			a, ok := s.spanOf()
			sc.addrs = append(sc.addrs, a)
			e.addrN++
			return ok
		})
	case 1:
		ok = s.fields(conditionsFields, func(int) bool {
			b, ok := s.bool()
			e.ready = 1
			if b {
				e.ready = 2
			}
			return ok
		})
	case 2:
		e.nodeName, ok = s.spanOf()
	case 3:
		e.zone, ok = s.spanOf()
	default:
		e.ref = true
		ok = s.fields(targetRefFields, func(i int) bool {
			var ok bool
			switch i {
			case 0:
				e.refKind, ok = s.spanOf()
			case 1:
				e.refNamespace, ok = s.spanOf()
			default:
				e.refName, ok = s.spanOf()
			}
			return ok
		})
	}
	return ok
}

// sliceStrings builds the one backing string of a slice's kept strings.
// A value repeated nearby (namespace, zone) is stored once.
type sliceStrings struct {
	raw    []byte
	b      strings.Builder
	recent [8]span // the last distinct values added, by offset in b
	next   int
	// backing is b's string, once every value is added.
	backing string
}

// add notes sp's value in the backing string and sets sp.off.
func (st *sliceStrings) add(sp *span) {
	if !sp.set {
		return
	}
	v := st.raw[sp.lo:sp.hi]
	if constString(v) != "" {
		sp.off = -1
		return
	}
	for _, r := range st.recent {
		if r.set && string(st.raw[r.lo:r.hi]) == string(v) {
			sp.off = r.off
			return
		}
	}
	sp.off = int32(st.b.Len())
	st.b.Write(v)
	st.recent[st.next] = *sp
	st.next = (st.next + 1) % len(st.recent)
}

// get returns the string at sp ("" if not set), once added.
func (st *sliceStrings) get(sp span) string {
	switch {
	case !sp.set:
		return ""
	case sp.off < 0:
		return constString(st.raw[sp.lo:sp.hi])
	}
	return st.backing[sp.off : sp.off+sp.hi-sp.lo]
}

func (e *endpointScratch) podRef(raw []byte) bool {
	return e.ref && e.refKind.set && string(raw[e.refKind.lo:e.refKind.hi]) == KindPod && e.refName.hi > e.refName.lo
}

func (sc *sliceScratch) build(raw []byte) *entry {
	// Only what the model keeps goes into the backing string: the service
	// name label, the ports, each endpoint's first address, its node,
	// zone and pod.
	st := sliceStrings{raw: raw}
	name := -1 // the service name label's value in sc.labels
	for i := 0; i+1 < len(sc.labels); i += 2 {
		if k := sc.labels[i]; string(raw[k.lo:k.hi]) == discoveryv1.LabelServiceName {
			name = i + 1
		}
	}
	size := 0
	if name >= 0 {
		size += int(sc.labels[name].hi - sc.labels[name].lo)
	}
	for _, e := range sc.endpoints {
		if e.addrN > 0 {
			a := sc.addrs[e.addrFirst]
			size += int(a.hi - a.lo)
		}
		size += int(e.refName.hi-e.refName.lo) + int(e.nodeName.hi-e.nodeName.lo)
	}
	st.b.Grow(size + 64)
	if name >= 0 {
		st.add(&sc.labels[name])
	}
	st.add(&sc.addressType)
	for i := range sc.ports {
		p := &sc.ports[i]
		st.add(&p.name)
		st.add(&p.protocol)
	}
	for i := range sc.endpoints {
		e := &sc.endpoints[i]
		if e.addrN > 0 {
			st.add(&sc.addrs[e.addrFirst])
		}
		st.add(&e.nodeName)
		st.add(&e.zone)
		if e.podRef(raw) {
			st.add(&e.refNamespace)
			st.add(&e.refName)
		}
	}
	st.backing = st.b.String()

	sl := &slimSlice{addressType: discoveryv1.AddressType(st.get(sc.addressType))}
	if name >= 0 {
		sl.serviceName = st.get(sc.labels[name])
	}
	if len(sc.ports) > 0 {
		sl.ports = make([]slimPort, len(sc.ports))
		for i, p := range sc.ports {
			sl.ports[i] = slimPort{name: st.get(p.name), protocol: corev1.Protocol(st.get(p.protocol)), port: p.port}
		}
	}
	if len(sc.endpoints) > 0 {
		sl.endpoints = make([]slimEndpoint, len(sc.endpoints))
	}
	for i, e := range sc.endpoints {
		ep := &sl.endpoints[i]
		if e.addrN > 0 {
			ep.address = st.get(sc.addrs[e.addrFirst])
		}
		ep.notReady = e.ready == 1
		ep.nodeName, ep.zone = st.get(e.nodeName), st.get(e.zone)
		if e.podRef(raw) {
			ep.podNamespace, ep.podName = st.get(e.refNamespace), st.get(e.refName)
		}
	}
	return &entry{slice: sl}
}

// constString returns the common short values without allocating, "" for
// any other.
func constString(v []byte) string {
	switch string(v) {
	case "TCP":
		return "TCP"
	case "UDP":
		return "UDP"
	case "Pod":
		return "Pod"
	case "http":
		return "http"
	case "IPv4":
		return "IPv4"
	}
	return ""
}
