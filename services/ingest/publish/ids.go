package publish

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// MsgID is the Nats-Msg-Id of a record:
// "<cluster>/<uid>/<resourceVersion>/<op>/<prevSeq>", each part escaped like a
// subject token so that no part can contain '/'.
//
// prevSeq, the sequence of the subject's previous record (0 for none), is
// there because a content-hash resourceVersion repeats when a file is
// reverted: without it, A→B→A within the dedup window would give the second
// A the id of the first and JetStream would drop it. A retry of one record
// keeps the same prevSeq and so the same id.
func MsgID(cluster, uid, rv string, op pb.Op, prevSeq uint64) string {
	var b strings.Builder
	b.Grow(len(cluster) + len(uid) + len(rv) + 32)
	b.WriteString(bus.EscapeToken(cluster))
	b.WriteByte('/')
	b.WriteString(bus.EscapeToken(uid))
	b.WriteByte('/')
	b.WriteString(bus.EscapeToken(rv))
	b.WriteByte('/')
	b.WriteString(opName(op))
	b.WriteByte('/')
	b.WriteString(strconv.FormatUint(prevSeq, 10))
	return b.String()
}

func opName(op pb.Op) string {
	switch op {
	case pb.Op_OP_ADD:
		return "ADD"
	case pb.Op_OP_UPDATE:
		return "UPDATE"
	case pb.Op_OP_DELETE:
		return "DELETE"
	}
	return "UNSPECIFIED"
}

// SynthUID is the uid given to an object whose source has none. It is
// deterministic per incarnation: the same for every ingest that sees the
// object while its subject's last record is seq (0: none), and new after a
// delete, because the delete record moves seq. It is shaped like a UUID
// (version 8, RFC 9562) for tools that expect one.
func SynthUID(cluster string, k Key, seq uint64) string {
	h := sha256.New()
	for _, s := range []string{cluster, k.Group, k.Kind, k.Namespace, k.Name} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write([]byte(strconv.FormatUint(seq, 10)))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	x := hex.EncodeToString(u)
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}
