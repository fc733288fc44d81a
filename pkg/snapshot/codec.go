package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/klauspost/compress/s2"
)

// magic starts every encoded snapshot (format version 2: each entry ends
// with the record's compact form, see Record.Model). Version 1, without
// it, is still read.
//
// A view (magicView) is the same layout written for frontends: live
// entries only, and an entry with a compact form carries an empty data
// field, so a frontend reads and hashes a third of the bytes. A view is
// written compressed (magicViewS2): after its header, the entries are an
// S2 stream (github.com/klauspost/compress/s2: framed blocks, each with
// its CRC), about a third of the bytes again. An uncompressed view is
// still read.
const (
	magic       = "PWSNAP2\n"
	magicV1     = "PWSNAP1\n"
	magicView   = "PWVIEW1\n"
	magicViewS2 = "PWVIEW2\n"
)

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
// unix nanos, a flags byte, and the subject, content, data and model form
// each as uvarint length and bytes. A view (see magicView) leaves out
// deleted entries and the data of entries that have a model form, and is
// compressed (magicViewS2) unless plainView.
func encode(w io.Writer, entries []entry, view, plainView bool) error {
	out := bufio.NewWriterSize(w, 256<<10)
	head := magic
	switch {
	case view && plainView:
		head = magicView
	case view:
		head = magicViewS2
	}
	if _, err := out.WriteString(head); err != nil {
		return err
	}
	bw, zw := out, (*s2.Writer)(nil)
	if head == magicViewS2 {
		zw = s2.NewWriter(out)
		// An early return still ends the writer's goroutines; after the
		// Close below, this one only reports that it is closed.
		defer zw.Close()
		bw = bufio.NewWriterSize(zw, 256<<10)
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
		data := r.Data
		if view {
			if e.flags&flagDeleted != 0 {
				continue
			}
			if len(r.Model) > 0 {
				data = nil
			}
		}
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
		if err := putB(data); err != nil {
			return err
		}
		if err := putB(r.Model); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return err
		}
	}
	return out.Flush()
}

// decode reads what encode wrote and calls fn for each entry, in order
// (from a view: Data nil where Model is set).
// Sequences must grow. It reads varints and the subject and content from
// the buffered reader's own buffer (Peek), so that each entry costs the
// subject's and content's strings and the data's slice and nothing else;
// this was half of reading a snapshot (BenchmarkReadSnapshot).
func decode(r io.Reader, fn func(Record, byte) error) error {
	br := bufio.NewReaderSize(r, 256<<10)
	head := make([]byte, len(magic))
	if _, err := io.ReadFull(br, head); err != nil {
		return fmt.Errorf("snapshot header: %w", err)
	}
	if string(head) != magic && string(head) != magicV1 && string(head) != magicView && string(head) != magicViewS2 {
		return fmt.Errorf("not a snapshot (header %q)", head)
	}
	withModel, view := string(head) != magicV1, string(head) == magicView || string(head) == magicViewS2
	if string(head) == magicViewS2 {
		br = bufio.NewReaderSize(s2.NewReader(br), 256<<10)
	}
	d := decoder{br: br}
	var last uint64
	for i := 0; ; i++ {
		seq, err := d.uvarint()
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
		u, err := d.uvarint()
		if err != nil {
			return fail(err)
		}
		nanos := int64(u >> 1) // zig-zag, as binary.PutVarint writes it
		if u&1 != 0 {
			nanos = ^nanos
		}
		flags, err := br.ReadByte()
		if err != nil {
			return fail(err)
		}
		subj, err := d.str()
		if err != nil {
			return fail(err)
		}
		content, err := d.str()
		if err != nil {
			return fail(err)
		}
		data, err := d.bytes()
		if err != nil {
			return fail(err)
		}
		var model []byte
		if withModel {
			if model, err = d.bytes(); err != nil {
				return fail(err)
			}
			if len(model) == 0 {
				model = nil
			}
		}
		if view {
			switch {
			case flags&flagDeleted != 0:
				return fail(errors.New("deleted entry in a view"))
			case model != nil && len(data) > 0:
				return fail(errors.New("view entry with both data and a model form"))
			case model != nil:
				data = nil
			}
		}
		if err := fn(Record{Subject: subj, Seq: seq, Time: time.Unix(0, nanos).UTC(), Content: content, Data: data, Model: model}, flags); err != nil {
			return err
		}
	}
}

// decoder reads encode's fields from a buffered reader.
type decoder struct{ br *bufio.Reader }

// uvarint reads one; io.EOF only when nothing at all is left.
func (d decoder) uvarint() (uint64, error) {
	b, err := d.br.Peek(binary.MaxVarintLen64)
	if len(b) == 0 {
		return 0, err
	}
	v, n := binary.Uvarint(b)
	switch {
	case n > 0:
		_, _ = d.br.Discard(n)
		return v, nil
	case n < 0:
		return 0, errors.New("varint overflows 64 bits")
	case err != nil && !errors.Is(err, io.EOF):
		return 0, err
	}
	return 0, io.ErrUnexpectedEOF // b holds all that is left, and it ends mid-varint
}

// length reads a field's length.
func (d decoder) length() (int, error) {
	n, err := d.uvarint()
	if err != nil {
		return 0, err
	}
	if n > maxField {
		return 0, fmt.Errorf("field of %d bytes", n)
	}
	return int(n), nil
}

// str reads a field as a string, from the reader's buffer when it fits.
func (d decoder) str() (string, error) {
	n, err := d.length()
	if err != nil || n == 0 {
		return "", err
	}
	if n <= d.br.Size() {
		b, err := d.br.Peek(n)
		if err != nil {
			return "", err
		}
		s := string(b)
		_, _ = d.br.Discard(n)
		return s, nil
	}
	b := make([]byte, n)
	_, err = io.ReadFull(d.br, b)
	return string(b), err
}

// bytes reads a field into a new slice.
func (d decoder) bytes() ([]byte, error) {
	n, err := d.length()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	_, err = io.ReadFull(d.br, b)
	return b, err
}
