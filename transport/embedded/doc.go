// Package embedded runs a nats-server with JetStream inside the current
// process: for the default run of jetsaga's demo and examples, and for
// tests, which need a real server but no setup.
//
// The server listens on loopback only. Stop it with Shutdown, which waits
// until its store is closed; a temporary store directory it created is
// then removed. StartProcess runs the same server in a child process so a
// test can kill it with SIGKILL.
//
// StartCluster runs a JetStream cluster of N such child processes on
// loopback, with fixed ports per node and temporary stores, and helpers
// for fault tests: Kill (SIGKILL), Stop, Restart, Isolate and Heal (a
// network partition, through route proxies in the calling process, with
// ClusterOptions.Partitionable), StepDown and LeaderOf (a stream's
// leader), and WaitReady (every node healthy: the meta leader known, every
// stream and consumer it hosts current). A program that uses
// StartProcess or StartCluster calls RunChildIfRequested first thing in
// TestMain or main. ForceReplicas makes a connection create every stream
// with a given replication factor, for suites written without one.
//
// A production deployment runs nats-server (or a JetStream cluster) on its
// own and connects with nats.Connect and the usual options (credentials,
// NKEYs, TLS); nothing in jetsaga depends on the server being embedded.
package embedded
