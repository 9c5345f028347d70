// Package memstore is an in-memory saga.Store, for tests and sagatest. It
// uses no goroutines or timers, so it is safe inside a testing/synctest
// bubble.
package memstore
