package ads

import (
	"sync"
	"sync/atomic"
	"time"
)

// decodeJob is one change message handed to a decoder: the record with
// its subject, sequence and pending count set, and the message's bytes.
type decodeJob struct {
	r    decodedRecord
	data []byte
}

// decodeAhead decodes change records on several goroutines and hands them
// on in the order they were sent. Records travel in batches (of one when
// following the stream live): batch k goes to decoder k mod n, each
// decoder works through its own batches in order, and the receiver takes
// batch k from decoder k mod n: the order needs no sequence numbers and
// no reorder buffer, and batches are reused. Decoding reads nothing of
// the model, so it runs on every core while one goroutine applies. A
// batch of many records costs the channel hand-offs once: handing on
// 20,000 records one by one took about 16 ms of two cores with nothing
// decoded (a snapshot's load sends that many at once).
//
// One goroutine sends (and a timer may flush) and one receives. Everything stops when quit is
// closed; wait returns once the decoders have.
type decodeAhead struct {
	// set at construction
	in     []chan []decodeJob // decoder i's batches, each at most depth
	out    []chan []decodeJob // decoder i's decoded batches, each at most depth
	free   chan []decodeJob   // received batches, for the sender to reuse
	batch  int
	quit   <-chan struct{}
	decode func(*decodedRecord, []byte)
	wg     sync.WaitGroup
	held   atomic.Int64 // records handed to the decoders and not yet received

	// the sender's, and with maxWait its timer's
	mu      sync.Mutex
	next    int         // the decoder of the next batch
	pending []decodeJob // the batch being filled
	maxWait time.Duration
	timer   *time.Timer // flushes a batch held maxWait (nil: no maxWait)

	// owned by the receiver
	recv int         // the decoder of the next batch
	cur  []decodeJob // the batch being received
	curI int         // its next record
}

// newDecodeAhead starts n decoders (at least one) that hold at most queue
// records between them, waiting or decoded, handed on one by one.
func newDecodeAhead(n, queue int, quit <-chan struct{}, decode func(*decodedRecord, []byte)) *decodeAhead {
	return newBatchedDecodeAhead(n, queue, 1, 0, quit, decode)
}

// newBatchedDecodeAhead is newDecodeAhead handing records on in batches of
// batch: send holds records until a batch is full, flush or closeInput
// hands on the rest, and so does a timer once the first record of a batch
// has waited maxWait (0: no timer).
func newBatchedDecodeAhead(n, queue, batch int, maxWait time.Duration, quit <-chan struct{}, decode func(*decodedRecord, []byte)) *decodeAhead {
	n, batch = max(n, 1), max(batch, 1)
	depth := max(queue/(2*n*batch), 1)
	p := &decodeAhead{in: make([]chan []decodeJob, n), out: make([]chan []decodeJob, n), free: make(chan []decodeJob, 2*n*depth+2),
		batch: batch, quit: quit, decode: decode, maxWait: maxWait}
	if maxWait > 0 && batch > 1 {
		p.timer = time.AfterFunc(time.Hour, func() { p.flush() })
		p.timer.Stop()
	}
	for i := range n {
		p.in[i], p.out[i] = make(chan []decodeJob, depth), make(chan []decodeJob, depth)
		p.wg.Go(func() { p.run(p.in[i], p.out[i]) })
	}
	return p
}

// run is one decoder. It closes out when in is closed and drained.
func (p *decodeAhead) run(in <-chan []decodeJob, out chan<- []decodeJob) {
	defer close(out)
	for {
		var b []decodeJob
		var ok bool
		select {
		case b, ok = <-in:
			if !ok {
				return
			}
		case <-p.quit:
			return
		}
		for i := range b {
			p.decode(&b[i].r, b[i].data)
		}
		select {
		case out <- b:
		case <-p.quit:
			return
		}
	}
}

// send adds the next record to the batch being filled and hands the batch
// to its decoder once full. It reports false, having handed on nothing
// more, once quit is closed.
func (p *decodeAhead) send(r decodedRecord, data []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending == nil {
		select {
		case b := <-p.free:
			p.pending = b
		default:
			p.pending = make([]decodeJob, 0, p.batch)
		}
	}
	p.pending = append(p.pending, decodeJob{r: r, data: data})
	if len(p.pending) < p.batch {
		if len(p.pending) == 1 && p.timer != nil {
			p.timer.Reset(p.maxWait)
		}
		return true
	}
	return p.flushLocked()
}

// flush hands the batch being filled to its decoder. It reports false,
// having handed on nothing, once quit is closed.
func (p *decodeAhead) flush() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flushLocked()
}

func (p *decodeAhead) flushLocked() bool {
	if len(p.pending) == 0 {
		return true
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	select {
	case p.in[p.next] <- p.pending:
	case <-p.quit:
		return false
	}
	p.held.Add(int64(len(p.pending)))
	p.pending = nil
	p.next = (p.next + 1) % len(p.in)
	return true
}

// closeInput hands on what is held and says that nothing more will be
// sent: once the decoders have handed on what they hold, receive reports
// the end.
func (p *decodeAhead) closeInput() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked()
	if p.timer != nil {
		p.timer.Stop()
	}
	for _, c := range p.in {
		close(c)
	}
}

// receive returns the next record in the order sent. It reports false
// when quit is closed, or after the last record once the input is closed.
func (p *decodeAhead) receive() (decodedRecord, bool) {
	r, ok := p.nextRecord()
	if !ok {
		return decodedRecord{}, false
	}
	return *r, true
}

// nextRecord is receive without the copy: the record stays in its batch,
// valid until the next call.
func (p *decodeAhead) nextRecord() (*decodedRecord, bool) {
	if p.curI == len(p.cur) {
		if p.cur != nil {
			clear(p.cur) // the records' data and decoded objects go
			select {
			case p.free <- p.cur[:0]:
			default:
			}
			p.cur = nil
		}
		select {
		case b, ok := <-p.out[p.recv]:
			if !ok {
				return nil, false
			}
			p.recv = (p.recv + 1) % len(p.out)
			p.cur, p.curI = b, 0
		case <-p.quit:
			return nil, false
		}
	}
	r := &p.cur[p.curI].r
	p.curI++
	p.held.Add(-1)
	return r, true
}

// each calls fn with every record, in order, until receive ends. fn must
// not keep the record: its place is reused once fn returns.
func (p *decodeAhead) each(fn func(*decodedRecord)) {
	for {
		r, ok := p.nextRecord()
		if !ok {
			return
		}
		fn(r)
	}
}

// queued is how many records the decoders hold, waiting or decoded (not
// those of a batch still being filled).
func (p *decodeAhead) queued() int { return int(p.held.Load()) }

// wait returns once every decoder has ended (quit closed, or the input
// closed and drained and handed on).
func (p *decodeAhead) wait() { p.wg.Wait() }
