package model

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// DecodeWire is Decode of an encoded pb.ChangeRecord: what Decode makes
// of what proto.Unmarshal makes of data, errors included (FuzzDecodeWire
// checks this). It reads the fields applying uses straight from the wire,
// without building the record: the record's object is read where it lies
// in data (so data must not change while the result is in use; nothing
// of the result refers to it). unmarshal was a tenth of a frontend's
// replay of the stream, most of it copying each record's object. Input
// it does not take as it is (a field of an unexpected wire type, a string
// that is not UTF-8, malformed bytes) goes through proto.Unmarshal.
func DecodeWire(data []byte) (Decoded, error) {
	if r, ok := readWire(data); ok {
		return decodeRecord(r.hasRef, r.key, r.op, r.uid, r.resourceVersion, r.object), nil
	}
	rec := &pb.ChangeRecord{}
	if err := proto.Unmarshal(data, rec); err != nil {
		return Decoded{}, err
	}
	return Decode(rec), nil
}

// wireRecord is what applying reads of a ChangeRecord.
type wireRecord struct {
	hasRef               bool
	key                  ObjectKey
	op                   pb.Op
	uid, resourceVersion string
	object               []byte
}

// Field numbers of pb.ChangeRecord and pb.ObjectRef (change.proto).
const (
	wireCluster, wireRef, wireOp, wireUID, wireResourceVersion, wireObservedAt, wireObject, wireSource = 1, 2, 3, 4, 5, 6, 7, 8
	wireGroup, wireVersion, wireKind, wireNamespace, wireName                                          = 1, 2, 3, 4, 5
)

// readWire reads a ChangeRecord as proto.Unmarshal would, and reports
// false for anything it leaves to proto.Unmarshal. Fields are read as
// they come: a later occurrence of a field replaces the earlier one, and
// a later ref is read into the same ref (proto's merge).
func readWire(b []byte) (wireRecord, bool) {
	var r wireRecord
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || !num.IsValid() {
			return r, false
		}
		b = b[n:]
		switch {
		case num == wireOp:
			if typ != protowire.VarintType {
				return r, false
			}
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return r, false
			}
			r.op, b = pb.Op(int32(v)), b[n:]
		case num < wireCluster || num > wireSource:
			// Unknown to this version: proto keeps it, nothing reads it.
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return r, false
			}
			b = b[n:]
		case typ != protowire.BytesType:
			return r, false
		default:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return r, false
			}
			b = b[n:]
			var ok bool
			switch num {
			case wireCluster:
				r.key.Cluster, ok = wireString(v)
			case wireRef:
				r.hasRef = true
				ok = readWireRef(v, &r.key)
			case wireUID:
				r.uid, ok = wireString(v)
			case wireResourceVersion:
				r.resourceVersion, ok = wireString(v)
			case wireObservedAt:
				ok = wireFields(v) // a Timestamp, unread: only well-formed
			case wireObject:
				r.object, ok = v, true
			case wireSource:
				_, ok = wireString(v)
			}
			if !ok {
				return r, false
			}
		}
	}
	return r, true
}

func readWireRef(b []byte, key *ObjectKey) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || !num.IsValid() {
			return false
		}
		b = b[n:]
		if num > wireName || num < wireGroup {
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return false
			}
			b = b[n:]
			continue
		}
		if typ != protowire.BytesType {
			return false
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		s, ok := wireString(v)
		if !ok {
			return false
		}
		switch num {
		case wireGroup:
			key.Group = s
		case wireKind:
			key.Kind = s
		case wireNamespace:
			key.Namespace = s
		case wireName:
			key.Name = s
		}
	}
	return true
}

// wireString is a string field's value; proto3 strings must be UTF-8.
func wireString(v []byte) (string, bool) {
	if !utf8.Valid(v) {
		return "", false
	}
	return string(v), true
}

// wireFields reports whether b is a sequence of well-formed fields.
func wireFields(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || !num.IsValid() {
			return false
		}
		b = b[n:]
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}
