package temporal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// The child worker process of TestWorkerKilledMidDelivery is this test
// binary, run with these environment variables.
const (
	envChildWorker = "JETSAGA_TEST_CHILD_WORKER" // the Temporal frontend host:port
	envChildNATS   = "JETSAGA_TEST_CHILD_NATS"
	envChildTQ     = "JETSAGA_TEST_CHILD_TASK_QUEUE"
)

// runChildWorker runs a worker whose delivery activity, right after its
// send, says "sent <id>" on stdout and hangs, to be killed there.
func runChildWorker() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child worker:", err); return 1 }
	c, err := client.Dial(client.Options{HostPort: os.Getenv(envChildWorker), Logger: log.NewStructuredLogger(quietLogger())})
	if err != nil {
		return fail(err)
	}
	nc, err := nats.Connect(os.Getenv(envChildNATS))
	if err != nil {
		return fail(err)
	}
	b, err := transport.NewJetStream(nc)
	if err != nil {
		return fail(err)
	}
	hang := func(in input) {
		fmt.Printf("sent %s\n", in.ID)
		select {} // killed here: the message is sent, the activity not complete
	}
	afterSend.Store(&hang)
	w, err := NewWorker(c, b, WithTaskQueue(os.Getenv(envChildTQ)), WithDeliveryTimeout(2*time.Second), WithLogger(quietLogger()))
	if err != nil {
		return fail(err)
	}
	if err := w.Run(context.Background()); err != nil {
		return fail(err)
	}
	return 0
}

// TestWorkerKilledMidDelivery kills (SIGKILL) a worker process after its
// delivery activity sent the timeout's message and before the activity
// completed. Another worker retries the activity once the attempt times
// out; the queue's duplicate detection makes that send a no-op: the
// message is delivered exactly once, and the workflow records the
// duplicate.
func TestWorkerKilledMidDelivery(t *testing.T) {
	t.Parallel() // waits on real time: overlaps the package's other long waits
	srv, ns := servers(t)
	c := srv.Client(t)
	b := broker(t, ns)
	tq := newTaskQueue()
	q, err := b.OpenQueue(t.Context(), transport.QueueConfig{Name: "killed-" + tq})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(c, WithTaskQueue(tq))
	if err != nil {
		t.Fatal(err)
	}

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envChildWorker+"="+srv.HostPort(), envChildNATS+"="+ns.ClientURL(), envChildTQ+"="+tq)
	child.Stderr = os.Stderr
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	sent := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "sent "); ok {
				sent <- id
			}
		}
	}()

	due := time.Now().Add(500 * time.Millisecond)
	ref, err := e.Schedule(t.Context(), timeout.Timeout{ID: "k1", Queue: q.Name(), At: due, Message: &transport.Message{Body: []byte("k1")}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-sent:
		if id != "k1" {
			t.Fatalf("child sent %q", id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child worker did not deliver within 30s")
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	killed := time.Now()
	if d := receive(t, q, 5*time.Second); d == nil || string(d.Body) != "k1" {
		t.Fatalf("the killed worker's send is not in the queue: %v", d)
	}

	startWorker(t, c, b, WithTaskQueue(tq))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var r result
	wid, _ := e.parseRef(ref)
	if err := c.GetWorkflow(ctx, wid, "").Get(ctx, &r); err != nil {
		t.Fatalf("workflow: %v", err)
	}
	t.Logf("delivery retried %v after the kill: %+v", time.Since(killed).Round(time.Millisecond), r)
	if r.Outcome != outcomeFired || !r.Duplicate {
		t.Errorf("result %+v, want fired by a retried activity whose send was a duplicate", r)
	}
	if d := receive(t, q, 2*time.Second); d != nil {
		t.Errorf("delivered twice: %q", d.Body)
	}
	if err := e.Cancel(t.Context(), ref); !errors.Is(err, timeout.ErrAlreadyFired) {
		t.Errorf("Cancel: %v, want ErrAlreadyFired", err)
	}
}
