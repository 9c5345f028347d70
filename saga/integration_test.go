package saga_test

// Integration tests of the dispatcher against a real embedded nats-server:
// JetStream queues, KV state, scheduled-message timeouts. They check the
// reliability targets (R2, R3, R5: restarts, competing endpoints, hostile input) and the commit protocol
// documented on record in record.go, with fault injection at each step of
// that protocol.

// Regression tests for bugs found by these tests and fixed.
