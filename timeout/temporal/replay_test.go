package temporal

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// record, when set, makes TestReplay first record the histories of
// recordCases on the dev server, as testdata/history-<record>-<case>.json,
// with the workflow code of this build:
//
//	go test -run TestReplay -record v1 .
//
// The v0 histories were recorded by the workflow before its sub-second
// path (commit 90d95c7), and must replay for as long as timeouts
// scheduled by that code may be pending.
var record = flag.String("record", "", "record the workflow's histories under this `version` before replaying them")

// recordCases are the histories -record records: each schedules one
// timeout due in due from now and cancels it after cancelAfter, if set,
// or right after its message was sent, with cancelInSend.
var recordCases = []struct {
	name         string
	due          time.Duration
	cancelAfter  time.Duration
	cancelInSend bool
	want         string // the workflow's outcome
}{
	{name: "fired-subsecond", due: 300 * time.Millisecond, want: outcomeFired},
	{name: "fired-timer", due: 1500 * time.Millisecond, want: outcomeFired},
	{name: "past-due", due: -time.Second, want: outcomeFired},
	{name: "cancelled", due: time.Hour, cancelAfter: 100 * time.Millisecond, want: outcomeCancelled},
	{name: "cancelled-subsecond", due: 800 * time.Millisecond, cancelAfter: 100 * time.Millisecond, want: outcomeCancelled},
	{name: "cancel-in-delivery", due: 300 * time.Millisecond, cancelInSend: true, want: outcomeFired},
}

// TestReplay replays every history in testdata with the workflow code
// of this build (worker.NewWorkflowReplayer): a change to the workflow
// that would not replay a history of an older version — a timeout
// pending when the workers are upgraded — fails it.
func TestReplay(t *testing.T) {
	if *record != "" {
		recordHistories(t, *record)
	}
	files, err := filepath.Glob(filepath.Join("testdata", "history-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]int{}
	for _, f := range files {
		versions[strings.SplitN(strings.TrimPrefix(filepath.Base(f), "history-"), "-", 2)[0]]++
	}
	// The histories recorded by the code before the sub-second path.
	if versions["v0"] != len(recordCases) {
		t.Fatalf("%d v0 histories in testdata (%v), want %d", versions["v0"], files, len(recordCases))
	}
	w := &workerConfig{config: config{deliveryTimeout: DefaultDeliveryTimeout, logger: quietLogger()}}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(w.timeoutWorkflow, workflow.RegisterOptions{Name: WorkflowType})
			if err := r.ReplayWorkflowHistoryFromJSONFile(log.NewStructuredLogger(quietLogger()), f); err != nil {
				t.Fatalf("replaying %s: %v", f, err)
			}
		})
	}
	t.Logf("replayed %d histories: %v", len(files), versions)
}

// recordHistories runs recordCases on the dev server and writes their
// histories to testdata, named after version.
func recordHistories(t *testing.T, version string) {
	srv, ns := servers(t)
	c := srv.Client(t)
	b := broker(t, ns)
	e, tq := servedEngine(t, c, b)
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, rc := range recordCases {
		queue := "replay-" + rc.name + "-" + tq
		q, err := b.Queue(t.Context(), queue)
		if err != nil {
			t.Fatal(err)
		}
		refc, sent := make(chan timeout.Ref, 1), make(chan error, 1)
		if rc.cancelInSend {
			cancel := func(in input) {
				if in.Queue == queue {
					sent <- e.Cancel(context.Background(), <-refc)
				}
			}
			afterSend.Store(&cancel)
		}
		ref, err := e.Schedule(t.Context(), timeout.Timeout{ID: rc.name, Queue: queue, At: time.Now().Add(rc.due), Message: &transport.Message{Body: []byte(rc.name)}})
		if err != nil {
			t.Fatal(err)
		}
		refc <- ref
		if rc.cancelAfter > 0 {
			time.Sleep(rc.cancelAfter) // a cancel some time into the wait
			if err := e.Cancel(t.Context(), ref); err != nil {
				t.Fatalf("%s: Cancel: %v", rc.name, err)
			}
		}
		wid, _ := e.parseRef(ref)
		var r result
		if err := c.GetWorkflow(t.Context(), wid, "").Get(t.Context(), &r); err != nil {
			t.Fatal(err)
		}
		afterSend.Store(nil)
		if rc.cancelInSend {
			if err := <-sent; !errors.Is(err, timeout.ErrAlreadyFired) {
				t.Fatalf("%s: Cancel during the send: %v, want ErrAlreadyFired", rc.name, err)
			}
		}
		if r.Outcome != rc.want {
			t.Fatalf("%s: outcome %q, want %q", rc.name, r.Outcome, rc.want)
		}
		if rc.want == outcomeFired && receive(t, q, 5*time.Second) == nil {
			t.Fatalf("%s: fired, but nothing on the queue", rc.name)
		}
		writeHistory(t, c, wid, filepath.Join("testdata", "history-"+version+"-"+rc.name+".json"))
	}
}

func writeHistory(t *testing.T, c client.Client, wid, file string) {
	var h historypb.History
	it := c.GetWorkflowHistory(t.Context(), wid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	bs, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append(bytes.TrimSpace(bs), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %s (%d events)", file, len(h.Events))
}
