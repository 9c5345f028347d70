package wiretest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/examples/twofactor"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/internal/wiretest"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// The queues of the test. Each has its own role for the Node client:
// authQueue is the twofactor dispatcher's (three partitions, so that the
// client's partition choice matters), eventsQueue the saga's events queue
// (two partitions, read by the client only), poisonQueue a queue that only
// the client receives from, with a MaxDeliveryCount of 2, and probeQueue a
// queue nobody reads, under whose prefix the client publishes on wrong
// subjects.
const (
	authQueue   = "auth"
	eventsQueue = "auth-events"
	poisonQueue = "poison"
	probeQueue  = "probe"

	authPartitions   = 3
	eventsPartitions = 2
	poisonMaxDeliver = 2
)

// nodeSummary is what client.mjs prints on stdout.
type nodeSummary struct {
	Failures       []string
	VectorsChecked int
	Sends          []struct {
		What, Expect, Queue, Type, MessageID, Subject, Body string
		Partition                                           int
		OK                                                  bool
	}
	Duplicate *struct {
		Refused bool
		Code    int
	}
	Events []struct {
		Type, Login, MessageID string
		DeliveryCount          int
	}
	Codes       map[string]string
	DeadLetters []struct {
		MessageID, Reason, Description, Source, Seq string
	}
	WrongSubjects []struct {
		Template, Subject string
		Refused           bool
	}
	Poison *struct {
		MaxDeliveryCount int
		Deliveries       []int
		DeadLetter       *struct{ MessageID, Reason, Description, Source string }
	}
}

// step is what the dispatcher's StepDone hook saw.
type step struct {
	Type, ID, MessageID string
	Outcome             saga.Outcome
	Props               map[string]string
}

// TestNodeClient runs node/client.mjs, a client of docs/wire.md written
// with the official nats npm package, against the twofactor saga on an
// embedded nats-server, and checks what it reports and what the saga did:
// every message it sent handled once (or dead-lettered with its reason),
// the duplicate refused, the instances in the states its messages lead to,
// every event delivered once, wrong subjects refused, and a message that
// only Node receivers abandon dead-lettered after MaxDeliveryCount.
func TestNodeClient(t *testing.T) {
	npmCI(t)
	doc, err := wiretest.ReadDoc(wireDoc)
	if err != nil {
		t.Fatal(err)
	}
	docPath, err := filepath.Abs(wireDoc)
	if err != nil {
		t.Fatal(err)
	}

	ctx := t.Context()
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	broker, err := transport.NewJetStream(nc, transport.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { broker.Close() })
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.New(ctx, js, kvstore.Config{Bucket: "wiretest"})
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu    sync.Mutex
		steps []step
	)
	hooks := saga.Hooks{StepDone: func(_ context.Context, si saga.StepInfo, r saga.StepResult) {
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, step{Type: si.MessageType, ID: si.ID, MessageID: si.MessageID, Outcome: r.Outcome, Props: maps.Clone(si.Properties)})
	}}
	d, err := saga.NewDispatcher(broker, store, authQueue,
		saga.WithSagas(twofactor.New(twofactor.Config{Events: eventsQueue})),
		saga.WithQueueConfig(transport.QueueConfig{Partitions: authPartitions}),
		saga.WithHooks(hooks), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Open(ctx); err != nil {
		t.Fatal(err)
	}
	events, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: eventsQueue, Partitions: eventsPartitions})
	if err != nil {
		t.Fatal(err)
	}
	// The poison queue stays open in this broker, whose housekeeping moves
	// a message that exhausted its deliveries to the dead-letter queue
	// (docs/wire.md, Limits of v1); nothing here receives from it.
	poison, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: poisonQueue, MaxDeliveryCount: poisonMaxDeliver, LockDuration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	probe, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: probeQueue})
	if err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- d.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("dispatcher: %v", err)
		}
	})

	sum := runNode(t, docPath, srv.ClientURL())

	for _, f := range sum.Failures {
		t.Errorf("node: %s", f)
	}
	if sum.VectorsChecked != len(doc.Vectors) {
		t.Errorf("node checked %d of the document's %d test vectors", sum.VectorsChecked, len(doc.Vectors))
	}
	if sum.Duplicate == nil || !sum.Duplicate.Refused || sum.Duplicate.Code != 10071 && sum.Duplicate.Code != 10164 {
		t.Errorf("the duplicate send: got %+v, want refused with err_code 10071 or 10164", sum.Duplicate)
	}

	wantDL := map[string]string{"node-malformed-1": saga.ReasonMalformed, "node-malformed-2": saga.ReasonMalformed, "node-unknown-1": saga.ReasonUnknownType}
	for _, dl := range sum.DeadLetters {
		if want, ok := wantDL[dl.MessageID]; !ok || dl.Reason != want || dl.Source != authQueue || dl.Description == "" || dl.Seq == "" {
			t.Errorf("Node read the dead letter %+v; want one of %v with its reason, source %s, a description and a sequence number", dl, wantDL, authQueue)
		}
		delete(wantDL, dl.MessageID)
	}
	if len(wantDL) > 0 {
		t.Errorf("Node did not read these dead letters back: %v", wantDL)
	}
	checkSteps(t, sum, &mu, &steps)
	checkInstances(t, ctx, d, sum)
	checkEvents(t, sum)

	var refused, accepted []string
	for _, w := range sum.WrongSubjects {
		if w.Refused {
			refused = append(refused, w.Subject)
		} else {
			accepted = append(accepted, w.Subject)
		}
	}
	if len(sum.WrongSubjects) == 0 || len(accepted) > 0 {
		t.Errorf("wrong subjects: the server acknowledged %q (refused %q); docs/wire.md says it refuses every one", accepted, refused)
	}

	switch p := sum.Poison; {
	case p == nil:
		t.Error("the poison part did not run")
	case p.MaxDeliveryCount != poisonMaxDeliver:
		t.Errorf("poison: node read MaxDeliveryCount %d from the queue's metadata, want %d", p.MaxDeliveryCount, poisonMaxDeliver)
	case p.DeadLetter == nil || p.DeadLetter.Reason != transport.ReasonMaxDeliveryCountExceeded || len(p.Deliveries) > poisonMaxDeliver:
		t.Errorf("poison: deliveries %v, dead letter %+v; want at most %d deliveries to Node and then a dead letter with reason %s",
			p.Deliveries, p.DeadLetter, poisonMaxDeliver, transport.ReasonMaxDeliveryCountExceeded)
	}
	// What Node received it completed, and no wrong subject may have left
	// a message anywhere: every queue is empty but for the dispatcher's
	// pending timeout (dan's expiry).
	for _, q := range []*transport.Queue{events, mustQueue(t, broker, authQueue), probe, poison} {
		t.Run("counts/"+q.Name(), func(t *testing.T) {
			testutil.Await(t, 10*time.Second, func() string {
				c, err := q.Counts(ctx)
				if err != nil {
					return err.Error()
				}
				if c.Active != 0 || c.DeadLettered != 0 || c.Scheduled != 0 && q.Name() != authQueue {
					return fmt.Sprintf("queue %s: counts %+v, want none active, dead-lettered or (but on the dispatcher's queue) scheduled", q.Name(), c)
				}
				return ""
			})
		})
	}
}

func mustQueue(t *testing.T, b *transport.Broker, name string) *transport.Queue {
	t.Helper()
	q, err := b.Queue(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// checkSteps checks that each message Node sent to the dispatcher was
// handled exactly once (or dead-lettered once, for the bad ones), the
// duplicate never, and that no step handled anything else.
func checkSteps(t *testing.T, sum nodeSummary, mu *sync.Mutex, steps *[]step) {
	t.Helper()
	type want struct {
		key     string // MessageID, or type and login for a message without one
		outcome saga.Outcome
	}
	var wants []want
	for _, s := range sum.Sends {
		if s.Queue != authQueue || s.Expect == "duplicate" || !s.OK {
			continue
		}
		w := want{key: s.MessageID, outcome: saga.Handled}
		if s.Expect == "dead-letter" {
			w.outcome = saga.DeadLettered
		}
		if s.MessageID == "" {
			var body struct{ Login string }
			if err := json.Unmarshal([]byte(s.Body), &body); err != nil {
				t.Fatalf("send %q: body %q: %v", s.What, s.Body, err)
			}
			w.key = s.Type + "/" + body.Login
		}
		wants = append(wants, w)
	}
	if len(wants) < 10 {
		t.Fatalf("node sent %d messages to the saga; the scenario has more (did it stop early?)", len(wants))
	}
	keyOf := func(s step) string {
		if s.MessageID != "" {
			return s.MessageID
		}
		return s.Type + "/" + s.ID
	}
	testutil.Await(t, 10*time.Second, func() string {
		mu.Lock()
		defer mu.Unlock()
		got := map[want]int{}
		for _, s := range *steps {
			got[want{keyOf(s), s.Outcome}]++
		}
		var why []string
		for _, w := range wants {
			if n := got[w]; n != 1 {
				why = append(why, fmt.Sprintf("%s %s %d times", w.key, w.outcome, n))
			}
			delete(got, w)
		}
		for w, n := range got {
			why = append(why, fmt.Sprintf("unexpected: %s %s %d times", w.key, w.outcome, n))
		}
		if len(why) > 0 {
			slices.Sort(why)
			return "dispatcher steps, want each sent message once: " + strings.Join(why, "; ")
		}
		return ""
	})
	// The property ann's start carried, escaped on the wire because of its
	// spaces, arrives as sent.
	mu.Lock()
	defer mu.Unlock()
	for _, s := range *steps {
		if s.MessageID == "node-ann-start" && s.Props["note"] != " padded " {
			t.Errorf("ann's start: property note %q, want %q", s.Props["note"], " padded ")
		}
	}
}

// checkInstances reads the instances through the saga API: ann and bob
// verified, carol failed (all three completed), dan still waiting with the
// code Node was sent and his expiry pending.
func checkInstances(t *testing.T, ctx context.Context, d *saga.Dispatcher, sum nodeSummary) {
	t.Helper()
	for _, login := range []string{"node-ann", "node-bob", "node-carol"} {
		in, err := d.Instance(ctx, "twofactor", login)
		if err != nil {
			t.Errorf("instance %s: %v", login, err)
			continue
		}
		if !in.Completed {
			t.Errorf("instance %s: not completed (%s)", login, in.Data)
		}
	}
	in, err := d.Instance(ctx, "twofactor", "node-dan")
	if err != nil {
		t.Fatalf("instance node-dan: %v", err)
	}
	var st twofactor.State
	if err := json.Unmarshal(in.Data, &st); err != nil {
		t.Fatalf("instance node-dan: %v (%s)", err, in.Data)
	}
	if in.Completed || st.User != "dan" || st.Code == "" || st.Code != sum.Codes["node-dan"] || st.Attempts != 0 || len(in.Timeouts) != 1 {
		t.Errorf("instance node-dan: completed %v, state %+v, %d timeouts; want running, user dan, the code Node got (%q), no attempts, one pending expiry",
			in.Completed, st, len(in.Timeouts), sum.Codes["node-dan"])
	}
	if _, err := d.Instance(ctx, "twofactor", "node-eve"); err == nil {
		t.Error("instance node-eve exists: a dead-lettered message started it")
	}
}

// checkEvents checks that Node got each of the saga's events once, on its
// first delivery.
func checkEvents(t *testing.T, sum nodeSummary) {
	t.Helper()
	var got []string
	for _, e := range sum.Events {
		got = append(got, e.Login+" "+strings.TrimPrefix(e.Type, "twofactor."))
		if e.DeliveryCount != 1 {
			t.Errorf("event %s %s: delivery count %d, want 1", e.Type, e.Login, e.DeliveryCount)
		}
	}
	want := []string{
		"node-ann CodeIssued", "node-ann CodeRejected", "node-ann Verified",
		"node-bob CodeIssued", "node-bob Verified",
		"node-carol CodeIssued", "node-carol CodeRejected", "node-carol CodeRejected", "node-carol Failed",
		"node-dan CodeIssued",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("events Node received:\n got %q\nwant %q", got, want)
	}
}

// nodeDir is the Node.js client's directory.
const nodeDir = "node"

// npmCI installs the client's packages from package-lock.json with npm ci
// when node_modules is missing or older than the lock file. Without node
// and npm the test fails: scripts/test installs them.
func npmCI(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: the Node.js wire client test needs node and npm (make test installs them as root: apt-get install -y nodejs npm)", tool)
		}
	}
	lock, err := os.Stat(filepath.Join(nodeDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	mods, err := os.Stat(filepath.Join(nodeDir, "node_modules", ".package-lock.json"))
	if err == nil && !mods.ModTime().Before(lock.ModTime()) {
		return
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = nodeDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in internal/wiretest/node (the nats package from the npm registry, as package-lock.json pins it): %v\n%s", err, out)
	}
}

// runNode runs the client and returns its summary; its stderr goes to the
// test log.
func runNode(t *testing.T, docPath, url string) nodeSummary {
	t.Helper()
	qs, err := json.Marshal(map[string]string{"auth": authQueue, "events": eventsQueue, "poison": poisonQueue, "probe": probeQueue})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute) // the client's own limit is 150 s
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "client.mjs", docPath, url, string(qs))
	cmd.Dir = nodeDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	t.Logf("node client.mjs stderr:\n%s", stderr.String())
	if err != nil {
		t.Fatalf("node client.mjs: %v (stdout %q)", err, stdout.String())
	}
	var sum nodeSummary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("node client.mjs: its summary: %v (stdout %q)", err, stdout.String())
	}
	return sum
}
