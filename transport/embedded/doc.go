// Package embedded runs a nats-server with JetStream inside the current
// process: for the default run of jetsaga's demo and examples, and for
// tests, which need a real server but no setup.
//
// The server listens on loopback only. Stop it with Shutdown, which waits
// until its store is closed; a temporary store directory it created is
// then removed. StartProcess runs the same server in a child process so a
// test can kill it with SIGKILL.
//
// A production deployment runs nats-server (or a JetStream cluster) on its
// own and connects with nats.Connect and the usual options (credentials,
// NKEYs, TLS); nothing in jetsaga depends on the server being embedded.
package embedded
