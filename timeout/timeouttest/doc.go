// Package timeouttest is the conformance suite every timeout engine
// passes: the transport engine on JetStream and in memory, the Router, and
// the Temporal engine.
package timeouttest
