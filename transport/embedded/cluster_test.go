package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMain(m *testing.M) {
	RunChildIfRequested() // the nodes of TestCluster
	os.Exit(m.Run())
}

// TestCluster starts a partitionable 3-node cluster and checks each
// helper against what JetStream itself reports: StepDown, Kill, Restart
// and Isolate move an R3 stream's leader while writes keep succeeding and
// nothing stored is lost; Close leaves no port listening and no store
// directory behind.
func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	began := time.Now()
	c, err := StartCluster(ctx, ClusterOptions{Partitionable: true})
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			c.Close()
		}
	})
	t.Logf("3 nodes ready in %v: %s", time.Since(began).Round(time.Millisecond), c.ClientURLs())

	nc, err := c.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const stream = "T"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"t.>"}, Replicas: 3}); err != nil {
		t.Fatalf("create R3 stream: %v", err)
	}
	published := 0
	publish := func(what string) {
		t.Helper()
		// The first publish after a leader change may time out while the
		// client reconnects or the new leader takes over: retry, bounded.
		deadline := time.Now().Add(20 * time.Second)
		for {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.Publish(pctx, "t.x", []byte(what), jetstream.WithMsgID(what))
			cancel()
			if err == nil {
				published++
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("publish %s: %v", what, err)
			}
		}
	}
	checkStored := func(when string) {
		t.Helper()
		t.Logf("+%v %s", time.Since(began).Round(time.Millisecond), when)
		// Right after a heal the node that was cut off may still answer as
		// the leader it was, with its old state, until it learns of the
		// new term: read until the count is right, for a while.
		var n uint64
		for deadline := time.Now().Add(20 * time.Second); ; {
			s, err := js.Stream(ctx, stream)
			if err != nil {
				t.Fatalf("%s: stream info: %v", when, err)
			}
			if n = s.CachedInfo().State.Msgs; n == uint64(published) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond) // polling the stream's state, which has no change feed
		}
		if n != uint64(published) {
			t.Errorf("%s: %d messages stored, want %d", when, n, published)
		}
	}
	publish("first")

	lead, err := c.LeaderOf(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	next, err := c.StepDown(ctx, stream)
	if err != nil {
		t.Fatalf("StepDown: %v", err)
	}
	if next == lead {
		t.Errorf("StepDown: leader still node %d", lead)
	}
	t.Logf("stepdown: leader %s -> %s", c.Name(lead), c.Name(next))
	publish("after-stepdown")
	checkStored("after stepdown")

	// Kill the leader: another takes over, writes go on with two nodes.
	lead = next
	if err := c.Kill(lead); err != nil {
		t.Fatalf("Kill(%d): %v", lead, err)
	}
	if c.Running(lead) {
		t.Errorf("Running(%d) after Kill: true", lead)
	}
	if conn, err := net.DialTimeout("tcp", c.ClientURL(lead)[len("nats://"):], time.Second); err == nil {
		conn.Close()
		t.Errorf("node %d still accepts connections after Kill", lead)
	}
	next, err = c.LeaderOf(ctx, stream)
	if err != nil {
		t.Fatalf("leader after killing node %d: %v", lead, err)
	}
	if next == lead {
		t.Errorf("leader after Kill(%d): still node %d", lead, lead)
	}
	t.Logf("killed leader %s (SIGKILL): new leader %s", c.Name(lead), c.Name(next))
	publish("after-kill")
	checkStored("with a node down")
	if err := c.Restart(lead); err != nil {
		t.Fatalf("Restart(%d): %v", lead, err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	checkStored("after the restart")

	// Isolate the leader: the majority elects another; the isolated node
	// cannot write (no quorum); healed, it catches up.
	lead, err = c.LeaderOf(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Isolate(lead); err != nil {
		t.Fatalf("Isolate(%d): %v", lead, err)
	}
	isolated, err := c.ConnectTo(lead, nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer isolated.Close()
	// An election takes 4-9 s; on a loaded 2-core machine (CI runs other
	// clusters' tests beside this one) it has taken over 30 s.
	actx, acancel := context.WithTimeout(ctx, 90*time.Second)
	next, err = c.awaitLeader(actx, stream, lead)
	acancel()
	if err != nil {
		for i := range c.Size() {
			for _, what := range []string{"routez", "jsz?streams=true&raft=true"} {
				resp, err := c.http.Get(fmt.Sprintf("http://127.0.0.1:%d/%s", c.monitor[i], what))
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					t.Logf("node %d %s: %s", i, what, b)
				}
			}
		}
		t.Fatalf("leader after isolating node %d: %v", lead, err)
	}
	t.Logf("isolated leader %s: new leader %s", c.Name(lead), c.Name(next))
	// Clients of the majority write on; one connected to the isolated
	// node cannot.
	majority, err := c.ConnectTo(next)
	if err != nil {
		t.Fatal(err)
	}
	defer majority.Close()
	all := js
	if js, err = jetstream.New(majority); err != nil {
		t.Fatal(err)
	}
	publish("while-isolated")
	js = all
	ijs, _ := jetstream.New(isolated)
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = ijs.Publish(pctx, "t.x", []byte("minority"))
	pcancel()
	if err == nil {
		t.Errorf("publish through the isolated node %d succeeded; want it refused or timed out (no quorum)", lead)
	} else {
		t.Logf("publish through the isolated node: %v (as it should)", err)
	}
	if err := c.Heal(lead); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("after heal: %v", err)
	}
	checkStored("after heal")
	if _, err := c.StepDown(ctx, "bad.name"); err == nil {
		t.Errorf("StepDown(bad.name): nil error, want an invalid-name error")
	}

	// Close: nothing listens, no store directory is left.
	var ports []int
	for i := range c.Size() {
		_, port, _ := net.SplitHostPort(c.ClientURL(i)[len("nats://"):])
		p, _ := strconv.Atoi(port)
		ports = append(ports, p, c.monitor[i], c.nodes[i].opts.ClusterPort)
	}
	for l := range c.proxy.listeners {
		ports = append(ports, c.proxy.listeners[l].Addr().(*net.TCPAddr).Port)
	}
	var dirs []string
	for _, p := range c.nodes {
		dirs = append(dirs, p.opts.StoreDir)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	closed = true
	for _, p := range ports {
		if conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p), time.Second); err == nil {
			conn.Close()
			t.Errorf("port %d still accepts connections after Close", p)
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("store dir %s after Close: %v, want it removed", d, err)
		}
	}
	t.Logf("%d messages published across stepdown, kill, restart and isolation, all stored; %d ports closed, %d dirs removed",
		published, len(ports), len(dirs))
}

// TestForceReplicas checks that the rewriting dialer makes a stream
// created without Replicas an R3 stream, and leaves other traffic intact.
func TestForceReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, ClusterOptions{})
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	defer c.Close()
	nc, err := c.Connect(ForceReplicas(3))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "F", Subjects: []string{"f.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.CachedInfo().Config.Replicas; r != 3 {
		t.Errorf("stream created without Replicas: %d replicas, want 3", r)
	}
	big := make([]byte, 200_000) // spans several writes of the connection
	for i := range big {
		big[i] = byte('a' + i%26)
	}
	for i := range 20 {
		if _, err := js.Publish(ctx, "f.x", big, jetstream.WithMsgID(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	m, err := s.GetMsg(ctx, 20)
	if err != nil || string(m.Data) != string(big) {
		t.Errorf("message 20 read back: %v, equal %t", err, err == nil && string(m.Data) == string(big))
	}
	s, err = js.UpdateStream(ctx, jetstream.StreamConfig{Name: "F", Subjects: []string{"f.>"}, Replicas: 1, Description: "updated"})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.CachedInfo().Config.Replicas; r != 3 || s.CachedInfo().Config.Description != "updated" {
		t.Errorf("stream updated with Replicas 1: %d replicas, description %q; want 3, updated", r, s.CachedInfo().Config.Description)
	}
}
