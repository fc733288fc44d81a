package bus

// DeliveryGaps finds a consumer's deliveries that never arrived. A
// JetStream consumer numbers every delivery, redeliveries included, so a
// gap in those numbers is deliveries lost in transit: a connection that
// died with them in flight, which the server sends again only after the
// ack wait. New messages are delivered in stream order, so when the
// stream sequences beside the gap are apart too, the lost ones lie
// between them. (A gap in delivery numbers alone is a lost redelivery of
// an older message, which comes again after the ack wait; a gap in
// stream sequences alone is messages the stream no longer holds.)
// The zero value is ready; one goroutine uses it.
type DeliveryGaps struct {
	seen                  bool
	lastDelivery, lastSeq uint64
}

// Next takes a delivery's number and stream sequence, and reports the
// stream sequences (from, to) between the last delivery and this one when
// deliveries went missing between them. The first delivery seen never
// reports a gap: a durable consumer may number from anywhere.
func (g *DeliveryGaps) Next(delivery, seq uint64) (from, to uint64, gap bool) {
	gap = g.seen && delivery > g.lastDelivery+1 && seq > g.lastSeq+1
	from, to = g.lastSeq, seq
	g.seen = true
	g.lastDelivery, g.lastSeq = max(g.lastDelivery, delivery), max(g.lastSeq, seq)
	return from, to, gap
}
