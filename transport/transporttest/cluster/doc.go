// Package cluster holds no code: its tests run the transport's conformance
// suite (transporttest.Run and RunKeyed) on a 3-node nats-server cluster,
// and the cluster's fault scenarios (leaders killed and stepped down mid
// workload). They are a package of their own so that go test runs them
// beside the memory and one-server runs of package transporttest, in a test
// binary of their own with its own -parallel bound.
//
// go test -jetsaga.soak (or JETSAGA_SOAK=1) runs the fault scenarios
// longer, with larger workloads.
package cluster
