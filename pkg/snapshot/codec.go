package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// magic starts every encoded snapshot (format version 1).
const magic = "PWSNAP1\n"

// maxField bounds one decoded field (subject, header, record): a change
// record is at most the stream's max message size, far below this.
const maxField = 64 << 20

// Flags of an encoded entry.
const (
	// flagDeleted: the subject's last record is a delete (a tombstone: its
	// Seq is the delete's, no data). Consumers skip it; the snapshotter
	// needs it to purge the subject later.
	flagDeleted byte = 1 << iota
	// flagStale: the live subject may have older records on the stream.
	flagStale
)

// entry is one encoded record with its flags.
type entry struct {
	rec   *Record
	flags byte
}

// encode writes entries as: magic, then per entry uvarint seq, varint
// unix nanos, a flags byte, and the subject, content and data each as
// uvarint length and bytes.
func encode(w io.Writer, entries []entry) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	if _, err := bw.WriteString(magic); err != nil {
		return err
	}
	var buf [binary.MaxVarintLen64]byte
	putU := func(v uint64) error { _, err := bw.Write(buf[:binary.PutUvarint(buf[:], v)]); return err }
	putB := func(b []byte) error {
		if err := putU(uint64(len(b))); err != nil {
			return err
		}
		_, err := bw.Write(b)
		return err
	}
	for _, e := range entries {
		r := e.rec
		if err := putU(r.Seq); err != nil {
			return err
		}
		if _, err := bw.Write(buf[:binary.PutVarint(buf[:], r.Time.UnixNano())]); err != nil {
			return err
		}
		if err := bw.WriteByte(e.flags); err != nil {
			return err
		}
		if err := putB([]byte(r.Subject)); err != nil {
			return err
		}
		if err := putB([]byte(r.Content)); err != nil {
			return err
		}
		if err := putB(r.Data); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// decode reads what encode wrote and calls fn for each entry, in order.
// Sequences must grow.
func decode(r io.Reader, fn func(Record, byte) error) error {
	br := bufio.NewReaderSize(r, 256<<10)
	head := make([]byte, len(magic))
	if _, err := io.ReadFull(br, head); err != nil {
		return fmt.Errorf("snapshot header: %w", err)
	}
	if string(head) != magic {
		return fmt.Errorf("not a snapshot (header %q)", head)
	}
	field := func() ([]byte, error) {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return nil, err
		}
		if n > maxField {
			return nil, fmt.Errorf("field of %d bytes", n)
		}
		b := make([]byte, n)
		_, err = io.ReadFull(br, b)
		return b, err
	}
	var last uint64
	for i := 0; ; i++ {
		seq, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			return nil
		}
		fail := func(err error) error {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("snapshot record %d: %w", i, err)
		}
		if err != nil {
			return fail(err)
		}
		if seq <= last {
			return fail(fmt.Errorf("seq %d after %d", seq, last))
		}
		last = seq
		nanos, err := binary.ReadVarint(br)
		if err != nil {
			return fail(err)
		}
		flags, err := br.ReadByte()
		if err != nil {
			return fail(err)
		}
		subj, err := field()
		if err != nil {
			return fail(err)
		}
		content, err := field()
		if err != nil {
			return fail(err)
		}
		data, err := field()
		if err != nil {
			return fail(err)
		}
		if err := fn(Record{Subject: string(subj), Seq: seq, Time: time.Unix(0, nanos).UTC(), Content: string(content), Data: data}, flags); err != nil {
			return err
		}
	}
}
