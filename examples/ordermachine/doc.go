// Package ordermachine is MassTransit's canonical order state machine
// ported to jetsaga's package saga/machine: an order is submitted,
// accepted, then processed by a request to the processing service; it
// completes, is rejected, or expires 30 days after submission.
//
//	service → dispatcher queue:   SubmitOrder, OrderAccepted
//	machine → processing queue:   ProcessOrder (a request, ReplyTo the dispatcher's queue)
//	processing → dispatcher:      OrderProcessed, or a machine.Fault
//	machine → notifications:      OrderCompleted, OrderRejected, OrderExpired
//
// A processing request that gets no answer within Config.ProcessTimeout
// is sent again, up to Config.Attempts times; then the order is Stalled
// until it is accepted again or expires. An answer that arrives after
// its request timed out is late: the machine ignores it (processing is
// idempotent by order ID, and the retry's answer completes the order).
//
// The machine's diagram (Mermaid, from the definition) is in
// testdata/order.mmd; docs/state-machines.md of the repository walks
// through it beside MassTransit's original.
package ordermachine
