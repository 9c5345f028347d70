package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
)

// An approval saga with the liveness rule on, whose reminder message
// forgets to say that the instance still waits for a decision: a reminded
// instance is stuck.

type approvalRequested struct{ Request string }
type approvalDecided struct{ Request string }
type approvalRemind struct{ Request string }

func (approvalRequested) MessageName() string { return "approval.Requested" }
func (approvalDecided) MessageName() string   { return "approval.Decided" }
func (approvalRemind) MessageName() string    { return "approval.Remind" }

func approvalSaga() saga.Saga {
	d := saga.Define[struct{ Reminded bool }]("approval", saga.CheckLiveness())
	saga.StartedBy(d, saga.By(func(m approvalRequested) string { return m.Request }),
		func(ctx context.Context, c *saga.Context[struct{ Reminded bool }], m approvalRequested) error {
			return c.Expect(saga.MessageName[approvalDecided]())
		})
	saga.Handles(d, saga.By(func(m approvalDecided) string { return m.Request }),
		func(ctx context.Context, c *saga.Context[struct{ Reminded bool }], m approvalDecided) error {
			c.MarkComplete()
			return nil
		})
	saga.Handles(d, saga.By(func(m approvalRemind) string { return m.Request }),
		func(ctx context.Context, c *saga.Context[struct{ Reminded bool }], m approvalRemind) error {
			c.Data.Reminded = true
			return nil // the seeded bug: no Expect, no timeout
		})
	return d
}

func TestSagasStuck(t *testing.T) {
	w := newWorkload(t)
	ctx := t.Context()
	store, err := kvstore.New(ctx, w.js, kvstore.Config{Bucket: w.bucket})
	if err != nil {
		t.Fatal(err)
	}
	d, err := saga.NewDispatcher(w.broker, store, "approvals", saga.WithSagas(approvalSaga()), saga.WithLogger(testutil.Logger()),
		saga.WithConcurrency(1)) // in queue order: a reminder after its request

	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() { defer close(finished); _ = d.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-finished })

	w.send(OrderPlaced{Order: "o1"}) // a saga without the rule: never listed
	for _, m := range []any{approvalRequested{"r1"}, approvalRequested{"r2"}, approvalRequested{"r3"},
		approvalRemind{"r2"}, approvalRemind{"r3"}, approvalDecided{"r3"}} {
		if _, err := d.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// r1 waits for its decision; r2 is stuck; r3 is reminded, then decided.
	testutil.Await(t, 10*time.Second, func() string {
		if w.handledCount("placed/o1") == 0 {
			return "order o1 not placed yet"
		}
		inst, err := d.Instance(ctx, "approval", "r3")
		if err != nil || !inst.Completed {
			return fmt.Sprintf("approval r3 not completed yet (%v)", err)
		}
		if inst, err := d.Instance(ctx, "approval", "r2"); err != nil || !strings.Contains(string(inst.Data), `"Reminded":true`) {
			return fmt.Sprintf("approval r2 not reminded yet (%v)", err)
		}
		return ""
	})

	var got []string
	for inst, err := range d.StuckInstances(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, inst.Saga+"/"+inst.ID)
	}
	if len(got) != 1 || got[0] != "approval/r2" {
		t.Errorf("Dispatcher.StuckInstances: got %v, want [approval/r2]", got)
	}

	for _, args := range [][]string{{"sagas", "stuck"}, {"sagas", "stuck", "approval"}} {
		vs := jsonOf[[]StuckView](w, 0, args...)
		var data bytes.Buffer
		if len(vs) == 1 {
			_ = json.Compact(&data, vs[0].Data)
		}
		if len(vs) != 1 || vs[0].Saga != "approval" || vs[0].ID != "r2" || data.String() != `{"Reminded":true}` {
			t.Errorf("jetsaga %s --json: got %+v, want approval/r2", strings.Join(args, " "), vs)
		}
	}
	if vs := jsonOf[[]StuckView](w, 0, "sagas", "stuck", "order"); len(vs) != 0 {
		t.Errorf("jetsaga sagas stuck order --json: got %+v, want none", vs)
	}
	r := w.must(0, "sagas", "stuck")
	if !regexpLine(r.stdout, `^approval\s+r2\s+\S+\s+\S+`) || !strings.Contains(r.stdout, "1 stuck instance(s)") {
		t.Errorf("jetsaga sagas stuck:\n%s", r.stdout)
	}
	if r := w.run("sagas", "stuck", "no.such"); r.code != ExitUsage {
		t.Errorf("jetsaga sagas stuck no.such: want exit %d, got %v", ExitUsage, r)
	}

	srv := w.console("", false)
	code, body := get(t, client(t), srv.URL+"/stuck")
	if code != 200 || !strings.Contains(body, `<a href="/sagas/approval/r2">r2</a>`) || strings.Contains(body, "/sagas/approval/r1") {
		t.Errorf("GET /stuck: %d\n%s", code, body)
	}
	if code, body := get(t, client(t), srv.URL+"/stuck?saga=order"); code != 200 || !strings.Contains(body, "no stuck instances") {
		t.Errorf("GET /stuck?saga=order: %d\n%s", code, body)
	}
}
