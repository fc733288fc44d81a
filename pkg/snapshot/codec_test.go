package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func codecEntries() []entry {
	at := time.Unix(1700000000, 123).UTC()
	return []entry{
		{rec: &Record{Subject: "pw.changes.c.Service.ns.a", Seq: 3, Time: at, Content: "h-1", Data: []byte("one"), Model: []byte("compact one")}},
		// A content longer than the decoder's buffer, and a large record.
		{rec: &Record{Subject: "pw.changes.c.Service.ns.b", Seq: 9, Time: at.Add(time.Second), Content: strings.Repeat("c", 300<<10), Data: bytes.Repeat([]byte{7}, 64<<10)}, flags: flagStale},
		{rec: &Record{Subject: "pw.changes.c.Service.ns.c", Seq: 12, Time: time.Unix(-5, -7).UTC(), Data: []byte{}}, flags: flagDeleted},
	}
}

func decodeAll(b []byte) ([]entry, error) {
	var out []entry
	err := decode(bytes.NewReader(b), func(r Record, fl byte) error {
		rc := r
		out = append(out, entry{rec: &rc, flags: fl})
		return nil
	})
	return out, err
}

// TestCodecFieldsAndTruncation: fields larger than the decoder's buffer
// and times before 1970 come back as written; an encoding cut anywhere
// but between two entries is an error, never a shorter snapshot.
func TestCodecFieldsAndTruncation(t *testing.T) {
	want := codecEntries()
	var buf bytes.Buffer
	if err := encode(&buf, want, false, false); err != nil {
		t.Fatal(err)
	}
	enc := buf.Bytes()
	got, err := decodeAll(enc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(entry{})); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	boundaries := map[int]bool{len(magic): true, len(enc): true}
	for i := range want {
		var b bytes.Buffer
		if err := encode(&b, want[:i+1], false, false); err != nil {
			t.Fatal(err)
		}
		boundaries[b.Len()] = true
	}
	for cut := 0; cut < len(enc); cut++ {
		if cut > 512 && cut < len(enc)-512 && !boundaries[cut] && cut%4999 != 0 {
			continue // the middle of the large fields, sampled
		}
		_, err := decodeAll(enc[:cut])
		switch {
		case boundaries[cut] && err != nil:
			t.Errorf("cut at entry boundary %d: %v", cut, err)
		case !boundaries[cut] && err == nil:
			t.Errorf("cut at %d of %d decoded without an error", cut, len(enc))
		case !boundaries[cut] && cut >= len(magic) && !errors.Is(err, io.ErrUnexpectedEOF):
			t.Errorf("cut at %d: %v, want unexpected EOF", cut, err)
		}
	}
}

// FuzzDecode: the decoder never panics, and what it decodes encodes to
// something that decodes to the same entries.
func FuzzDecode(f *testing.F) {
	var buf bytes.Buffer
	if err := encode(&buf, codecEntries()[:1], false, false); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	for _, plain := range []bool{false, true} {
		buf.Reset()
		if err := encode(&buf, codecEntries(), true, plain); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add([]byte(magicViewS2))
	f.Add([]byte(magic))
	f.Add([]byte(magic + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeAll(b)
		if err != nil {
			return
		}
		var again bytes.Buffer
		plainView := bytes.HasPrefix(b, []byte(magicView))
		if err := encode(&again, got, plainView || bytes.HasPrefix(b, []byte(magicViewS2)), plainView); err != nil {
			t.Fatal(err)
		}
		back, err := decodeAll(again.Bytes())
		if err != nil {
			t.Fatalf("re-encoded entries do not decode: %v", err)
		}
		if diff := cmp.Diff(got, back, cmp.AllowUnexported(entry{})); diff != "" {
			t.Fatalf("re-encoded entries differ (-first +second):\n%s", diff)
		}
	})
}

// encodeV1 writes entries in format version 1 (no model forms), as
// snapshots written before version 2 hold them.
func encodeV1(entries []entry) []byte {
	b := []byte(magicV1)
	for _, e := range entries {
		r := e.rec
		b = binary.AppendUvarint(b, r.Seq)
		b = binary.AppendVarint(b, r.Time.UnixNano())
		b = append(b, e.flags)
		for _, f := range [][]byte{[]byte(r.Subject), []byte(r.Content), r.Data} {
			b = binary.AppendUvarint(b, uint64(len(f)))
			b = append(b, f...)
		}
	}
	return b
}

// TestCodecReadsVersion1: a snapshot written before model forms reads
// as it was written, every record without one.
func TestCodecReadsVersion1(t *testing.T) {
	want := codecEntries()
	for _, e := range want {
		e.rec.Model = nil
	}
	got, err := decodeAll(encodeV1(want))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(entry{})); diff != "" {
		t.Fatalf("version 1 read back (-want +got):\n%s", diff)
	}
}

// TestCodecView: a view holds the live entries only, and an entry with a
// model form comes without its data; one without a form keeps its data.
// It is written compressed, and a view written uncompressed (by writers
// before compression) reads the same. A view that holds a deleted entry,
// or data beside a form, is refused.
func TestCodecView(t *testing.T) {
	for _, plain := range []bool{false, true} {
		var buf bytes.Buffer
		if err := encode(&buf, codecEntries(), true, plain); err != nil {
			t.Fatal(err)
		}
		if head, want := string(buf.Bytes()[:len(magic)]), map[bool]string{false: magicViewS2, true: magicView}[plain]; head != want {
			t.Errorf("plain=%v: header %q, want %q", plain, head, want)
		}
		got, err := decodeAll(buf.Bytes())
		if err != nil {
			t.Fatalf("plain=%v: %v", plain, err)
		}
		want := codecEntries()[:2]
		want[0].rec.Data = nil // it has a form
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(entry{})); diff != "" {
			t.Fatalf("plain=%v: view read back (-want +got):\n%s", plain, diff)
		}
	}
	for name, entries := range map[string][]entry{
		"deleted entry":      codecEntries()[2:],
		"data beside a form": codecEntries()[:1],
	} {
		var full bytes.Buffer
		if err := encode(&full, entries, false, false); err != nil {
			t.Fatal(err)
		}
		b := append([]byte(magicView), full.Bytes()[len(magic):]...)
		if _, err := decodeAll(b); err == nil {
			t.Errorf("a view with a %s decoded without an error", name)
		}
	}
}

// TestCodecViewCompressed: a compressed view of many alike entries (as a
// mesh's compact forms are) is a fraction of the plain one, and a view
// damaged anywhere in its stream, or cut short, is an error: never fewer
// or other entries.
func TestCodecViewCompressed(t *testing.T) {
	var entries []entry
	for i := range 2000 {
		entries = append(entries, entry{rec: &Record{
			Subject: fmt.Sprintf("pw.changes.c1.discovery_k8s_io.EndpointSlice.shop.svc-%04d-abcde", i),
			Seq:     uint64(i + 1), Time: time.Unix(1_780_000_000, int64(i)).UTC(),
			Model: []byte(fmt.Sprintf("\x01svc-%04d\x0010.%d.%d.1 node-%d zone-a 10.%d.%d.2 node-%d zone-b", i, i/250, i%250, i%7, i/250, i%250, i%5)),
		}})
	}
	var plain, packed bytes.Buffer
	if err := encode(&plain, entries, true, true); err != nil {
		t.Fatal(err)
	}
	if err := encode(&packed, entries, true, false); err != nil {
		t.Fatal(err)
	}
	if packed.Len()*2 > plain.Len() {
		t.Errorf("compressed view is %d bytes, the plain one %d: want less than half", packed.Len(), plain.Len())
	}
	got, err := decodeAll(packed.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(entries) {
		t.Fatalf("read %d entries, want %d", len(got), len(entries))
	}
	enc := packed.Bytes()
	for _, at := range []int{len(magic) + 20, len(enc) / 2, len(enc) - 5} {
		bad := bytes.Clone(enc)
		bad[at] ^= 0x40
		if got, err := decodeAll(bad); err == nil {
			t.Errorf("a view with byte %d of %d changed decoded without an error (%d entries)", at, len(enc), len(got))
		}
	}
	for _, cut := range []int{len(magic) + 3, len(enc) / 3, len(enc) - 1} {
		if got, err := decodeAll(enc[:cut]); err == nil {
			t.Errorf("a view cut at %d of %d decoded without an error (%d entries)", cut, len(enc), len(got))
		}
	}
}

// failAfter is a writer that fails once n bytes are written.
type failAfter struct{ n int }

func (w *failAfter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		n := w.n
		w.n = 0
		return n, errors.New("the object store went away")
	}
	w.n -= len(p)
	return len(p), nil
}

// A compressed view whose writer fails part way returns the error and
// leaves none of the compressor's goroutines behind (TestMain checks).
func TestCodecViewWriteFails(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	var entries []entry
	for i := range 5000 {
		form := make([]byte, 600) // incompressible, so that the writer sees most of it
		for j := range form {
			form[j] = byte(rnd.Uint32())
		}
		entries = append(entries, entry{rec: &Record{Subject: fmt.Sprintf("pw.changes.c.Service.ns.s%d", i), Seq: uint64(i + 1), Time: time.Unix(0, 0).UTC(), Model: form}})
	}
	if err := encode(&failAfter{n: 300 << 10}, entries, true, false); err == nil {
		t.Fatal("encode into a failing writer returned no error")
	}
}
