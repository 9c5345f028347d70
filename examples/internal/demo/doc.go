// Package demo is the plumbing that jetsaga's example programs share:
// connecting to NATS or starting an embedded nats-server, opening a demo's
// broker and key-value store apart from other applications, printing
// timestamped lines from several goroutines, and consuming an events queue
// so that a scenario can wait for the next event of a type.
//
// It is demo plumbing, not part of jetsaga's API: it lives under internal/
// so that only the examples import it, and it changes with them. What an
// example is about (its saga, its scenario, the words it prints for each
// event) stays in the example; a service of your own would use
// transport.NewJetStream, kvstore.New and saga.NewDispatcher directly, as
// examples/httpservice does.
package demo
