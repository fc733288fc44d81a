package ads

import "sync"

// decodeJob is one change message handed to a decoder: the record with
// its subject, sequence and pending count set, and the message's bytes.
type decodeJob struct {
	r    decodedRecord
	data []byte
}

// decodeAhead decodes change records on several goroutines and hands them
// on in the order they were sent. Record k goes to decoder k mod n, each
// decoder works through its own records in order, and the receiver takes
// record k from decoder k mod n: the order needs no sequence numbers, no
// reorder buffer and no allocation per record. Decoding reads nothing of
// the model, so it runs on every core while one goroutine applies.
//
// One goroutine sends and one receives. Everything stops when quit is
// closed; wait returns once the decoders have.
type decodeAhead struct {
	// set at construction
	in     []chan decodeJob     // decoder i's records, each at most depth
	out    []chan decodedRecord // decoder i's decoded records, each at most depth
	quit   <-chan struct{}
	decode func(*decodedRecord, []byte)
	wg     sync.WaitGroup

	next int // owned by the sender: the decoder of the next record
	recv int // owned by the receiver: the decoder of the next record
}

// newDecodeAhead starts n decoders (at least one) that hold at most queue
// records between them, waiting or decoded.
func newDecodeAhead(n, queue int, quit <-chan struct{}, decode func(*decodedRecord, []byte)) *decodeAhead {
	n = max(n, 1)
	depth := max(queue/(2*n), 1)
	p := &decodeAhead{in: make([]chan decodeJob, n), out: make([]chan decodedRecord, n), quit: quit, decode: decode}
	for i := range n {
		p.in[i], p.out[i] = make(chan decodeJob, depth), make(chan decodedRecord, depth)
		p.wg.Go(func() { p.run(p.in[i], p.out[i]) })
	}
	return p
}

// run is one decoder. It closes out when in is closed and drained.
func (p *decodeAhead) run(in <-chan decodeJob, out chan<- decodedRecord) {
	defer close(out)
	for {
		var j decodeJob
		var ok bool
		select {
		case j, ok = <-in:
			if !ok {
				return
			}
		case <-p.quit:
			return
		}
		p.decode(&j.r, j.data)
		select {
		case out <- j.r:
		case <-p.quit:
			return
		}
	}
}

// send hands the next record to its decoder. It reports false, having
// sent nothing, once quit is closed.
func (p *decodeAhead) send(r decodedRecord, data []byte) bool {
	select {
	case p.in[p.next] <- decodeJob{r: r, data: data}:
	case <-p.quit:
		return false
	}
	p.next = (p.next + 1) % len(p.in)
	return true
}

// closeInput says that nothing more will be sent: once the decoders have
// handed on what they hold, receive reports the end.
func (p *decodeAhead) closeInput() {
	for _, c := range p.in {
		close(c)
	}
}

// receive returns the next record in the order sent. It reports false
// when quit is closed, or after the last record once the input is closed.
func (p *decodeAhead) receive() (decodedRecord, bool) {
	select {
	case r, ok := <-p.out[p.recv]:
		if !ok {
			return decodedRecord{}, false
		}
		p.recv = (p.recv + 1) % len(p.out)
		return r, true
	case <-p.quit:
		return decodedRecord{}, false
	}
}

// each calls fn with every record, in order, until receive ends.
func (p *decodeAhead) each(fn func(*decodedRecord)) {
	for {
		r, ok := p.receive()
		if !ok {
			return
		}
		fn(&r)
	}
}

// queued is how many records the decoders hold, waiting or decoded.
func (p *decodeAhead) queued() int {
	n := 0
	for i := range p.in {
		n += len(p.in[i]) + len(p.out[i])
	}
	return n
}

// wait returns once every decoder has ended (quit closed, or the input
// closed and drained and handed on).
func (p *decodeAhead) wait() { p.wg.Wait() }
