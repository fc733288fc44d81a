package model

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// A frontend that starts from a snapshot decodes every live object in
// it, and Services and EndpointSlices are nearly all of them. Their JSON
// was most of that start's CPU, so a snapshot also keeps, beside each
// such record, its compact form: the record's key and what [Decode] made
// of its object, in a binary layout read in one pass with a handful of
// allocations. [DecodeCompact] gives back exactly what Decode gives
// (FuzzCompactForm checks this); the snapshot keeps the record itself
// too, for everything else that reads it.
//
// Layout: a version byte, the record's cluster, group, kind, namespace,
// name, op, uid and resourceVersion, then a kind byte and the object.
// Strings are a uvarint length and the bytes; an optional value is a
// byte (0 absent, 1 present) and the value; a list or map is a uvarint
// count plus one (0: nil) and its items; integers are varints.

const (
	compactVersion byte = 1
	compactService byte = 1
	compactSlice   byte = 2
)

// CompactForm returns the compact form of a change record that adds or
// updates a Service or an EndpointSlice whose object decodes; nil for any
// other record, which a snapshot then keeps as the record alone.
func CompactForm(rec *pb.ChangeRecord) []byte {
	if k := rec.GetRef().GetKind(); k != KindService && k != KindEndpointSlice {
		return nil
	}
	d := Decode(rec)
	if d.e == nil || d.err != nil || (d.e.svc == nil) == (d.e.slice == nil) {
		return nil
	}
	w := compactWriter{b: make([]byte, 0, 64+len(rec.GetObject())/2)}
	w.b = append(w.b, compactVersion)
	for _, s := range []string{d.key.Cluster, d.key.Group, d.key.Kind, d.key.Namespace, d.key.Name} {
		w.str(s)
	}
	w.b = binary.AppendUvarint(w.b, uint64(rec.GetOp()))
	w.str(rec.GetUid())
	w.str(rec.GetResourceVersion())
	if svc := d.e.svc; svc != nil {
		w.b = append(w.b, compactService)
		w.service(svc)
	} else {
		w.b = append(w.b, compactSlice)
		w.slice(d.e.slice)
	}
	return w.b
}

// CompactKnown reports whether b is in a layout this build decodes (its
// version byte). A form it reports is still refused by [DecodeCompact]
// if malformed.
func CompactKnown(b []byte) bool { return len(b) > 0 && b[0] == compactVersion }

// CompactRecord is [CompactForm] of an encoded change record (nil when
// it does not decode), for the snapshotter.
func CompactRecord(data []byte) []byte {
	var rec pb.ChangeRecord
	if proto.Unmarshal(data, &rec) != nil {
		return nil
	}
	return CompactForm(&rec)
}

type compactWriter struct{ b []byte }

func (w *compactWriter) str(s string) {
	w.b = binary.AppendUvarint(w.b, uint64(len(s)))
	w.b = append(w.b, s...)
}

func (w *compactWriter) flag(set bool) {
	if set {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}

func (w *compactWriter) optStr(p *string) {
	w.flag(p != nil)
	if p != nil {
		w.str(*p)
	}
}

// count writes a list's or map's length, nil apart from empty.
func (w *compactWriter) count(n int, isNil bool) {
	if isNil {
		w.b = append(w.b, 0)
		return
	}
	w.b = binary.AppendUvarint(w.b, uint64(n)+1)
}

func (w *compactWriter) int(v int64) { w.b = binary.AppendVarint(w.b, v) }

// service writes the layout the first forms had: an annotations map
// holding exportTo alone, then the spec the model reads.
func (w *compactWriter) service(svc *slimService) {
	if svc.hasExportTo {
		w.count(1, false)
		w.str(exportToAnnotation)
		w.str(svc.exportTo)
	} else {
		w.count(0, true)
	}
	w.str(string(svc.typ))
	w.str(svc.externalName)
	w.str(svc.clusterIP)
	w.count(len(svc.ports), svc.ports == nil)
	for i := range svc.ports {
		p := &svc.ports[i]
		w.str(p.Name)
		w.str(string(p.Protocol))
		w.optStr(p.AppProtocol)
		w.int(int64(p.Port))
		w.int(int64(p.TargetPort.Type))
		w.int(int64(p.TargetPort.IntVal))
		w.str(p.TargetPort.StrVal)
		w.int(int64(p.NodePort))
	}
}

// slice writes the layout the first forms had, from what the model keeps
// of a slice: a labels map holding the service name alone, each
// endpoint's first address, its readiness as false or absent, and its
// Pod reference. Forms written with the whole labels map and every
// address read the same (see compactReader.slice).
func (w *compactWriter) slice(sl *slimSlice) {
	if sl.serviceName != "" {
		w.count(1, false)
		w.str(discoveryv1.LabelServiceName)
		w.str(sl.serviceName)
	} else {
		w.count(0, true)
	}
	w.str(string(sl.addressType))
	w.count(len(sl.ports), sl.ports == nil)
	for _, p := range sl.ports {
		w.flag(p.name != "")
		if p.name != "" {
			w.str(p.name)
		}
		w.flag(p.protocol != "")
		if p.protocol != "" {
			w.str(string(p.protocol))
		}
		w.flag(p.port != 0)
		if p.port != 0 {
			w.int(int64(p.port))
		}
		w.flag(false) // appProtocol: the model does not read it
	}
	w.count(len(sl.endpoints), sl.endpoints == nil)
	for _, e := range sl.endpoints {
		if e.address == "" {
			w.count(0, true)
		} else {
			w.count(1, false)
			w.str(e.address)
		}
		if e.notReady {
			w.b = append(w.b, 1)
		} else {
			w.b = append(w.b, 0)
		}
		for _, v := range []string{e.nodeName, e.zone} {
			w.flag(v != "")
			if v != "" {
				w.str(v)
			}
		}
		w.flag(e.podName != "")
		if e.podName != "" {
			w.str(KindPod)
			w.str(e.podNamespace)
			w.str(e.podName)
		}
	}
}

var errCompact = errors.New("malformed compact form")

// compactReader reads a compact form: varints from b, strings as
// substrings of s, one string holding all of b, so the strings of an
// object share one allocation.
type compactReader struct {
	b   []byte
	s   string
	i   int
	bad bool
}

func (r *compactReader) uvarint() uint64 {
	if r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.i:])
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.i += n
	return v
}

// varint reads what binary.AppendVarint wrote: a zig-zag uvarint.
func (r *compactReader) varint() int64 {
	u := r.uvarint()
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

func (r *compactReader) int32() int32 {
	v := r.varint()
	if v != int64(int32(v)) {
		r.bad = true
	}
	return int32(v)
}

func (r *compactReader) byte() byte {
	if r.bad || r.i >= len(r.b) {
		r.bad = true
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

func (r *compactReader) flag() bool {
	switch r.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	r.bad = true
	return false
}

func (r *compactReader) str() string {
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)-r.i) {
		r.bad = true
		return ""
	}
	s := r.s[r.i : r.i+int(n)]
	r.i += int(n)
	return s
}

// count reads a length written by count: -1 for nil. It is bounded by
// the form's own length before it sizes an allocation: no list has more
// items than the form has bytes.
func (r *compactReader) count() int {
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b))+1 {
		r.bad = true
		return -1
	}
	return int(n) - 1
}

// DecodeCompact decodes what [CompactForm] wrote into what [Decode] makes
// of the record it was made from, ready for [Store.ApplyDecoded].
func DecodeCompact(b []byte) (Decoded, error) {
	r := compactReader{b: b, s: string(b)}
	if r.byte() != compactVersion {
		return Decoded{}, fmt.Errorf("%w: unknown version", errCompact)
	}
	d := Decoded{hasRef: true}
	d.key = ObjectKey{Cluster: r.str(), Group: r.str(), Kind: r.str(), Namespace: r.str(), Name: r.str()}
	op := r.uvarint()
	d.op = pb.Op(int32(op))
	d.uid, d.resourceVersion = r.str(), r.str()
	switch r.byte() {
	case compactService:
		d.e = &entry{svc: r.service()}
	case compactSlice:
		d.e = &entry{slice: r.slice()}
	default:
		r.bad = true
	}
	if r.bad || r.i != len(b) || (op != uint64(pb.Op_OP_ADD) && op != uint64(pb.Op_OP_UPDATE)) {
		return Decoded{}, errCompact
	}
	return d, nil
}

// service reads what compactWriter.service wrote, or what the first
// forms held (every annotation), into what the model keeps.
func (r *compactReader) service() *slimService {
	svc := &slimService{}
	for range max(r.count(), 0) {
		if k, v := r.str(), r.str(); k == exportToAnnotation {
			svc.exportTo, svc.hasExportTo = v, true
		}
	}
	svc.typ = corev1.ServiceType(r.str())
	svc.externalName = r.str()
	svc.clusterIP = r.str()
	n := r.count()
	if n < 0 {
		return svc
	}
	svc.ports = make([]corev1.ServicePort, n)
	for i := range svc.ports {
		p := &svc.ports[i]
		p.Name = r.str()
		p.Protocol = corev1.Protocol(r.str())
		if r.flag() {
			s := r.str()
			p.AppProtocol = &s
		}
		p.Port = r.int32()
		p.TargetPort = intstr.IntOrString{Type: intstr.Type(r.varint()), IntVal: r.int32(), StrVal: r.str()}
		p.NodePort = r.int32()
		if r.bad {
			return svc
		}
	}
	return svc
}

// slice reads what compactWriter.slice wrote, or what the first forms
// held (every label, every address, appProtocol, readiness true), into
// what the model keeps.
func (r *compactReader) slice() *slimSlice {
	sl := &slimSlice{}
	for range max(r.count(), 0) {
		k, v := r.str(), r.str()
		if k == discoveryv1.LabelServiceName {
			sl.serviceName = v
		}
	}
	sl.addressType = discoveryv1.AddressType(r.str())
	if n := r.count(); n > 0 {
		sl.ports = make([]slimPort, n)
		for i := range sl.ports {
			p := &sl.ports[i]
			if r.flag() {
				p.name = r.str()
			}
			if r.flag() {
				p.protocol = corev1.Protocol(r.str())
			}
			if r.flag() {
				p.port = r.int32()
			}
			if r.flag() {
				r.str() // appProtocol
			}
			if r.bad {
				return sl
			}
		}
	}
	n := r.count()
	if n <= 0 {
		return sl
	}
	sl.endpoints = make([]slimEndpoint, n)
	for i := range sl.endpoints {
		e := &sl.endpoints[i]
		for j := range max(r.count(), 0) {
			if a := r.str(); j == 0 {
				e.address = a
			}
		}
		switch r.byte() {
		case 0, 2:
		case 1:
			e.notReady = true
		default:
			r.bad = true
		}
		if r.flag() {
			e.nodeName = r.str()
		}
		if r.flag() {
			e.zone = r.str()
		}
		if r.flag() {
			kind, ns, name := r.str(), r.str(), r.str()
			if kind == KindPod && name != "" {
				e.podNamespace, e.podName = ns, name
			}
		}
		if r.bad {
			return sl
		}
	}
	return sl
}
