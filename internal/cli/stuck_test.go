package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
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
	d := w.dispatcher("approvals", saga.WithSagas(approvalSaga()),
		saga.WithConcurrency(1)) // in queue order: a reminder after its request
	w.send(OrderPlaced{Order: "o1"}) // a saga without the rule: never listed
	sendAll(t, d, approvalRequested{"r1"}, approvalRequested{"r2"}, approvalRequested{"r3"},
		approvalRemind{"r2"}, approvalRemind{"r3"}, approvalDecided{"r3"})
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

	// Exit 7 when it lists any, 0 when none: a check for cron.
	for _, args := range [][]string{{"sagas", "stuck"}, {"sagas", "stuck", "approval"}} {
		vs := jsonOf[[]StuckView](w, ExitStuck, args...)
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
	r := w.must(ExitStuck, "sagas", "stuck")
	if !regexpLine(r.stdout, `^approval\s+r2\s+\S+\s+\S+`) || !strings.Contains(r.stdout, "1 stuck instance(s)") ||
		!strings.Contains(r.stderr, "stuck instances found: 1") {
		t.Errorf("jetsaga sagas stuck:\n%v", r)
	}
	if r := w.must(0, "sagas", "stuck", "order"); !strings.Contains(r.stdout, "0 stuck instance(s)") {
		t.Errorf("jetsaga sagas stuck order:\n%v", r)
	}
	if r := w.run("sagas", "stuck", "no.such"); r.code != ExitUsage {
		t.Errorf("jetsaga sagas stuck no.such: want exit %d, got %v", ExitUsage, r)
	}
	if r := w.run("--bucket", "no_such_bucket", "sagas", "stuck"); r.code != ExitNotFound {
		t.Errorf("jetsaga sagas stuck on a missing bucket: want exit %d, got %v", ExitNotFound, r)
	}
	if r := w.must(0, "sagas", "stuck", "--help"); !strings.Contains(r.stdout, "It exits 7 when it lists any stuck instance") ||
		!strings.Contains(r.stdout, "7  stuck instances found") {
		t.Errorf("jetsaga sagas stuck --help does not document exit 7:\n%s", r.stdout)
	}

	// sagas show says what a checked instance's last step expects.
	for _, c := range []struct {
		saga, id string
		expects  []string // nil: not checked
		stuck    bool
		wantText string // the text output's expects line; "" for none
	}{
		{"approval", "r1", []string{"approval.Decided"}, false, "approval.Decided"},
		{"approval", "r2", []string{}, true, "no message, and no timeout is pending: stuck"},
		{"order", "o1", nil, false, ""},
	} {
		v := jsonOf[InstanceView](w, 0, "sagas", "show", c.saga, c.id)
		if (v.Expects == nil) != (c.expects == nil) || !slices.Equal(v.Expects, c.expects) || v.Stuck != c.stuck {
			t.Errorf("sagas show %s %s --json: expects %#v, stuck %v; want %#v, %v", c.saga, c.id, v.Expects, v.Stuck, c.expects, c.stuck)
		}
		raw := w.must(0, "sagas", "show", c.saga, c.id, "--json").stdout
		if has := strings.Contains(raw, `"expects"`); has != (c.expects != nil) {
			t.Errorf("sagas show %s %s --json: an \"expects\" key is there: %v, want %v\n%s", c.saga, c.id, has, c.expects != nil, raw)
		}
		text := w.must(0, "sagas", "show", c.saga, c.id).stdout
		if c.wantText == "" && strings.Contains(text, "expects") || c.wantText != "" && !regexpLine(text, `^expects\s+`+regexp.QuoteMeta(c.wantText)+"$") {
			t.Errorf("sagas show %s %s: want the line \"expects %s\"\n%s", c.saga, c.id, c.wantText, text)
		}
	}

	srv := w.console("", false)
	code, body := get(t, client(t), srv.URL+"/stuck")
	if code != 200 || !strings.Contains(body, `<a href="/sagas/approval/r2">r2</a>`) || strings.Contains(body, "/sagas/approval/r1") {
		t.Errorf("GET /stuck: %d\n%s", code, body)
	}
	if code, body := get(t, client(t), srv.URL+"/stuck?saga=order"); code != 200 || !strings.Contains(body, "no stuck instances") {
		t.Errorf("GET /stuck?saga=order: %d\n%s", code, body)
	}
	if code, body := get(t, client(t), srv.URL+"/sagas/approval/r1"); code != 200 || !strings.Contains(body, `<td id="expects">approval.Decided</td>`) {
		t.Errorf("GET /sagas/approval/r1: %d, want what it expects\n%s", code, body)
	}
}

func TestInstanceExpectsText(t *testing.T) {
	pending := []TimeoutView{{Handle: "h1"}}
	for _, c := range []struct {
		name string
		v    InstanceView
		want string
	}{
		{"not checked", InstanceView{}, ""},
		{"not checked, with timeouts", InstanceView{Timeouts: pending}, ""},
		{"expects two", InstanceView{Expects: []string{"a.B", "a.C"}}, "a.B, a.C"},
		{"expects none, waits for a timeout", InstanceView{Expects: []string{}, Timeouts: pending}, "no message (waits for its pending timeouts)"},
		{"stuck", InstanceView{Expects: []string{}, Stuck: true}, "no message, and no timeout is pending: stuck"},
		{"completed", InstanceView{Expects: []string{}, Completed: true}, "no message"},
	} {
		if got := c.v.expectsText(); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
