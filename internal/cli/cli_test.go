package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// setUp plays the demo workload: three orders placed (two timeouts each),
// one of them paid (its timeouts cancelled), two fragile ones and one of
// an unknown type dead-lettered.
func setUp(t *testing.T) *workload { return setUpIn(t, false) }

// setUpIn is setUp with the order saga's records in its queue's state
// (saga/queuestore) if inQueue.
func setUpIn(t *testing.T, inQueue bool) *workload {
	w := startWorkload(t, nil, inQueue)
	for _, o := range []string{"o1", "o2", "o3"} {
		w.send(OrderPlaced{Order: o})
	}
	w.send(OrderPlaced{Order: "o4", Fragile: true})
	w.send(OrderPlaced{Order: "o5", Fragile: true}, saga.WithMessageID("msg-o5"))
	if _, err := w.queueHandle(w.queue).Send(context.Background(), &transport.Message{
		Body: []byte(`{}`), MessageID: "bogus-1", PartitionKey: "tenant-9", Properties: map[string]string{saga.TypeProperty: "shop.Bogus"}}); err != nil {
		t.Fatal(err)
	}
	testutil.AwaitTrue(t, 15*time.Second, "three orders placed", func() bool {
		return w.handledCount("placed/o1")+w.handledCount("placed/o2")+w.handledCount("placed/o3") == 3
	})
	w.send(OrderPaid{Order: "o3"})
	testutil.AwaitTrue(t, 15*time.Second, "o3 paid", func() bool { return w.handledCount("paid/o3") == 1 })
	testutil.AwaitTrue(t, 15*time.Second, "three dead letters, four timeouts", func() bool {
		qs, err := func() ([]QueueInfo, error) {
			r := w.run("queues", "list", "--json")
			if r.code != 0 {
				t.Fatalf("%v", r)
			}
			return decode[[]QueueInfo](t, r.stdout), nil
		}()
		return err == nil && len(qs) > 0 && qs[0].DeadLettered == 3 && qs[0].Scheduled == 4 && qs[0].Active == 0
	})
	return w
}

func TestQueuesAndScheduled(t *testing.T) {
	w := setUp(t)

	qs := jsonOf[[]QueueInfo](w, 0, "queues", "list")
	want := QueueInfo{Name: "orders", Partitions: 1, Active: 0, Scheduled: 4, DeadLettered: 3}
	if len(qs) != 1 || qs[0] != want {
		t.Fatalf("queues list: got %+v, want [%+v]", qs, want)
	}
	r := w.must(0, "queues", "list")
	if !strings.Contains(r.stdout, "QUEUE") || !regexpLine(r.stdout, `orders\s+1\s+0\s+4\s+3`) {
		t.Fatalf("queues list table:\n%s", r.stdout)
	}

	page := jsonOf[BrowsePage](w, 0, "queues", "browse", "orders", "--state", "scheduled")
	if len(page.Messages) != 4 || page.Next != 0 {
		t.Fatalf("browse scheduled: %+v", page)
	}
	for _, m := range page.Messages {
		if m.State != "scheduled" || !transport.IsScheduledSeq(m.Seq) || m.Partition != 0 || m.Local == 0 ||
			m.ScheduledAt == nil || m.Properties["jetsaga-saga"] != "order" || m.EnqueuedAt.IsZero() {
			t.Errorf("browsed timeout: %+v", m)
		}
	}
	first := jsonOf[BrowsePage](w, 0, "queues", "browse", "orders", "--state", "scheduled", "--max", "3")
	if len(first.Messages) != 3 || first.Next != page.Messages[3].Seq {
		t.Fatalf("first page: %+v (next want %d)", first, page.Messages[3].Seq)
	}
	rest := jsonOf[BrowsePage](w, 0, "queues", "browse", "orders", "--from", strconv.FormatUint(first.Next, 10))
	if len(rest.Messages) != 1 || rest.Messages[0].Seq != page.Messages[3].Seq {
		t.Fatalf("second page: %+v", rest)
	}
	r = w.must(0, "queues", "browse", "orders", "--state", "scheduled", "--max", "3")
	if !strings.Contains(r.stdout, "more: --from "+strconv.FormatUint(first.Next, 10)) || !strings.Contains(r.stdout, "0:s") {
		t.Fatalf("browse table:\n%s", r.stdout)
	}

	// Peek by PARTITION:sLOCAL shows the message in full.
	m := page.Messages[0]
	peek := jsonOf[BrowsePage](w, 0, "queues", "peek", "orders", transport.FormatSeq(m.Seq))
	if len(peek.Messages) != 1 || peek.Messages[0].Seq != m.Seq || peek.Messages[0].Body == nil {
		t.Fatalf("peek %s: %+v", transport.FormatSeq(m.Seq), peek)
	}
	r = w.must(0, "queues", "peek", "orders", strconv.FormatUint(m.Seq, 10))
	for _, s := range []string{"state", "scheduled", "property jetsaga-saga", "body"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("peek output lacks %q:\n%s", s, r.stdout)
		}
	}

	// Cancel: definite outcomes, distinct exit codes.
	mail := w.queueHandle("mail")
	ctx := context.Background()
	late, err := mail.Schedule(ctx, &transport.Message{Body: []byte("later")}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	soon, err := mail.Schedule(ctx, &transport.Message{Body: []byte("soon")}, time.Now().Add(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	lateSeq := strconv.FormatUint(late, 10)
	r = w.must(ExitAborted, "scheduled", "cancel", "mail", lateSeq) // stdin is not a terminal
	if !strings.Contains(r.stderr, "--yes") {
		t.Errorf("refusal does not name --yes: %v", r)
	}
	outs := jsonOf[[]CancelOutcome](w, 0, "scheduled", "cancel", "mail", lateSeq, "--yes")
	if len(outs) != 1 || outs[0].Outcome != "cancelled" {
		t.Fatalf("cancel: %+v", outs)
	}
	outs = jsonOf[[]CancelOutcome](w, ExitNotFound, "scheduled", "cancel", "mail", lateSeq, "--yes")
	if outs[0].Outcome != "not-found" {
		t.Fatalf("cancel again: %+v", outs)
	}
	r = w.must(ExitAlreadyActivated, "scheduled", "cancel", "mail", transport.FormatSeq(soon), "--yes")
	if !strings.Contains(r.stdout, "already-activated") {
		t.Fatalf("cancel of a message due now: %v", r)
	}
	w.must(ExitNotFound, "scheduled", "cancel", "mail", "0:7", "--yes") // an active number
	w.must(ExitNotFound, "scheduled", "cancel", "nosuch", "0:s1", "--yes")

	// A queue that does not exist is not created by looking at it.
	w.must(ExitNotFound, "queues", "browse", "nosuch")
	qs = jsonOf[[]QueueInfo](w, 0, "queues", "list")
	if names := queueNames(qs); !slices.Equal(names, []string{"mail", "orders"}) {
		t.Fatalf("queues after browsing a missing one: %v", names)
	}
}

func queueNames(qs []QueueInfo) []string {
	var out []string
	for _, q := range qs {
		out = append(out, q.Name)
	}
	return out
}

// TestSagasAndTimeouts runs the saga commands on each store the
// command reads: a KV bucket (--bucket), and a queue's state
// (--state-queue, saga/queuestore), whose records are in the same
// streams as the queue's scheduled messages and must not count as any.
func TestSagasAndTimeouts(t *testing.T) {
	t.Run("kvstore", func(t *testing.T) { testSagasAndTimeouts(t, false) })
	t.Run("queuestore", func(t *testing.T) { testSagasAndTimeouts(t, true) })
}

func testSagasAndTimeouts(t *testing.T, inQueue bool) {
	w := setUpIn(t, inQueue)

	types := jsonOf[[]SagaType](w, 0, "sagas", "list")
	if !slices.Equal(types, []SagaType{{Saga: "order", Instances: 3}}) {
		t.Fatalf("saga types: %+v", types)
	}
	p1 := jsonOf[InstancePage](w, 0, "sagas", "list", "order", "--limit", "2")
	if p1.Total != 3 || len(p1.Instances) != 2 || p1.Instances[0].ID != "o1" || p1.Next != "o2" {
		t.Fatalf("page 1: %+v", p1)
	}
	p2 := jsonOf[InstancePage](w, 0, "sagas", "list", "order", "--after", p1.Next)
	if len(p2.Instances) != 1 || p2.Instances[0].ID != "o3" || !p2.Instances[0].Completed || p2.Next != "" {
		t.Fatalf("page 2: %+v", p2)
	}
	r := w.must(0, "sagas", "list", "order", "--limit", "2")
	if !strings.Contains(r.stdout, "next page: --after o2") || !regexpLine(r.stdout, `^o1\s+running`) {
		t.Fatalf("sagas list table:\n%s", r.stdout)
	}

	// By an index (saga.Index): live instances only, by ID, paged.
	f := jsonOf[FoundPage](w, 0, "sagas", "find", "order", "shop=main", "--limit", "1")
	if len(f.Instances) != 1 || f.Instances[0].ID != "o1" || f.Next != "o1" || f.Building {
		t.Fatalf("find shop=main, page 1: %+v", f)
	}
	f = jsonOf[FoundPage](w, 0, "sagas", "find", "order", "shop=main", "--after", f.Next)
	if len(f.Instances) != 1 || f.Instances[0].ID != "o2" || f.Next != "" {
		t.Fatalf("find shop=main, page 2 (o3 completed): %+v", f)
	}
	if f := jsonOf[FoundPage](w, 0, "sagas", "find", "order", "order=o1"); len(f.Instances) != 1 || f.Instances[0].ID != "o1" {
		t.Fatalf("find order=o1: %+v", f)
	}
	if f := jsonOf[FoundPage](w, 0, "sagas", "find", "order", "order=o1.*.>"); len(f.Instances) != 0 {
		t.Fatalf("find order=o1.*.> (a value, never a pattern): %+v", f)
	}
	r = w.must(0, "sagas", "find", "order", "shop=main")
	if !regexpLine(r.stdout, `^o1\s+running`) || !strings.Contains(r.stdout, `2 instances with shop="main"`) {
		t.Fatalf("sagas find table:\n%s", r.stdout)
	}
	w.must(ExitUsage, "sagas", "find", "order", "shop")
	w.must(ExitUsage, "sagas", "find", "order", "sh op=main")
	w.must(ExitUsage, "sagas", "find", "order", "shop=a\x01b")

	// A rebuild is asked of the application's dispatchers, on their queue.
	rq := jsonOf[ReindexRequest](w, 0, "sagas", "reindex", "order", "--queue", "orders")
	if rq.Saga != "order" || rq.Queue != "orders" || !strings.HasPrefix(rq.MessageID, "jetsaga-reindex-order-") {
		t.Fatalf("sagas reindex: %+v", rq)
	}
	w.must(ExitUsage, "sagas", "reindex", "order")
	w.must(ExitNotFound, "sagas", "reindex", "order", "--queue", "nosuch")

	v := jsonOf[InstanceView](w, 0, "sagas", "show", "order", "o1")
	if v.ID != "o1" || v.Completed || v.InboxSize != 1 || len(v.Timeouts) != 2 || !strings.Contains(compact(t, v.Data), `"Order":"o1"`) {
		t.Fatalf("show o1: %+v", v)
	}
	for _, tv := range v.Timeouts {
		if tv.Engine != "queue" || tv.Queue != "orders" || !transport.IsScheduledSeq(tv.Seq) || time.Until(tv.At) < 50*time.Minute {
			t.Errorf("o1 timeout: %+v", tv)
		}
	}
	if v.Timeouts[0].Type != "shop.Remind" || v.Timeouts[1].Type != "shop.Expire" {
		t.Errorf("timeouts not in due order: %+v", v.Timeouts)
	}
	r = w.must(0, "sagas", "show", "order", "o1")
	for _, s := range []string{`"Order": "o1"`, "pending timeouts: 2", "shop.Remind", "inbox\t", "queue"} {
		if !strings.Contains(strings.ReplaceAll(r.stdout, "  ", "\t"), s) && !strings.Contains(r.stdout, s) {
			t.Errorf("sagas show lacks %q:\n%s", s, r.stdout)
		}
	}
	w.must(ExitNotFound, "sagas", "show", "order", "nope")
	// Hostile IDs are encoded, never subject wildcards.
	w.must(ExitNotFound, "sagas", "show", "order", "o1.*.>")
	w.must(ExitUsage, "sagas", "list", "ord.>")

	all := jsonOf[[]PendingView](w, 0, "timeouts", "list", "--saga", "order")
	if len(all) != 4 {
		t.Fatalf("timeouts of order: %+v", all)
	}
	mine := jsonOf[[]PendingView](w, 0, "timeouts", "list", "--saga", "order", "--id", "o1", "--queue", "orders")
	if len(mine) != 2 || mine[0].Engine != "queue" || mine[0].ID != "o1" || mine[0].Type != "shop.Remind" || mine[0].Seq != v.Timeouts[0].Seq {
		t.Fatalf("timeouts of o1: %+v", mine)
	}
	if got := jsonOf[[]PendingView](w, 0, "timeouts", "list", "--saga", "order", "--id", ">"); len(got) != 0 {
		t.Fatalf("timeouts of instance \">\": %+v", got)
	}
	w.must(ExitUsage, "timeouts", "list", "--id", "o1")

	// Cancel the timeouts of o1: refused without --yes off a terminal,
	// declined at the prompt, then confirmed at it.
	w.must(ExitAborted, "sagas", "cancel-timeouts", "order", "o1")
	tty := []Option{WithTerminal(func(io.Reader) bool { return true })}
	if r := w.runWith(tty, "n\n", "sagas", "cancel-timeouts", "order", "o1"); r.code != ExitAborted || !strings.Contains(r.stderr, "[y/N]") {
		t.Fatalf("declined: %v", r)
	}
	r = w.runWith(tty, "y\n", "sagas", "cancel-timeouts", "order", "o1")
	if r.code != 0 || !strings.Contains(r.stdout, "cancelled 2 timeout(s) of order/o1") {
		t.Fatalf("confirmed: %v", r)
	}
	if v := jsonOf[InstanceView](w, 0, "sagas", "show", "order", "o1"); len(v.Timeouts) != 0 || v.OutboxSize != 0 {
		t.Fatalf("o1 after cancel: %+v", v)
	}
	if left := jsonOf[[]PendingView](w, 0, "timeouts", "list", "--saga", "order", "--id", "o1"); len(left) != 0 {
		t.Fatalf("o1's timeouts still scheduled: %+v", left)
	}
	res := jsonOf[struct {
		Saga      string                `json:"saga"`
		ID        string                `json:"id"`
		Cancelled []saga.PendingTimeout `json:"cancelled"`
		Pending   string                `json:"engine_cancel_pending"`
	}](w, 0, "sagas", "cancel-timeouts", "order", "o2", "--yes")
	if len(res.Cancelled) != 2 || res.Pending != "" {
		t.Fatalf("cancel o2: %+v", res)
	}
	if left := jsonOf[[]PendingView](w, 0, "timeouts", "list"); len(left) != 0 {
		t.Fatalf("timeouts left: %+v", left)
	}
	w.must(ExitNotFound, "sagas", "cancel-timeouts", "order", "nope", "--yes")
	if vs := jsonOf[[]StuckView](w, 0, "sagas", "stuck"); len(vs) != 0 {
		t.Fatalf("stuck instances of a saga without CheckLiveness: %+v", vs)
	}
	if inQueue {
		// A queue that does not exist is not created; a hostile name is
		// refused before any subject is made of it.
		for _, c := range []struct {
			queue string
			code  int
		}{{"nope", ExitNotFound}, {"ord.>", ExitUsage}, {"*", ExitUsage}} {
			w.stateQueue = c.queue
			w.must(c.code, "sagas", "list")
		}
		w.stateQueue = w.queue
		if qs := jsonOf[[]QueueInfo](w, 0, "queues", "list"); len(qs) != 1 {
			t.Fatalf("queues after --state-queue nope: %+v", qs)
		}
	}
}

func TestDeadLetters(t *testing.T) {
	w := setUp(t)

	dls := jsonOf[BrowsePage](w, 0, "dlq", "list", "orders")
	if len(dls.Messages) != 3 {
		t.Fatalf("dead letters: %+v", dls)
	}
	reasons := map[string]int{}
	for _, m := range dls.Messages {
		reasons[m.DeadLetterReason]++
		if m.DeadLetterDescription == "" || m.DeadLetterSource != "orders" || m.State != "dead-lettered" {
			t.Errorf("dead letter: %+v", m)
		}
	}
	if reasons[saga.ReasonPermanent] != 2 || reasons[saga.ReasonUnknownType] != 1 {
		t.Fatalf("reasons: %v", reasons)
	}
	if got := jsonOf[BrowsePage](w, 0, "dlq", "list", "orders", "--reason", saga.ReasonUnknownType); len(got.Messages) != 1 {
		t.Fatalf("--reason: %+v", got)
	} else if got.Messages[0].PartitionKey != "tenant-9" {
		t.Errorf("dead letter of a message with PartitionKey tenant-9: partition_key %q", got.Messages[0].PartitionKey)
	}
	if got := jsonOf[BrowsePage](w, 0, "dlq", "list", "orders", "--since", "1h", "--type", "shop.OrderPlaced"); len(got.Messages) != 2 {
		t.Fatalf("--since --type: %+v", got)
	}
	if got := jsonOf[BrowsePage](w, 0, "dlq", "list", "orders", "--until", "1h"); len(got.Messages) != 0 {
		t.Fatalf("--until 1h ago: %+v", got)
	}
	r := w.must(0, "dlq", "list", "orders")
	if !strings.Contains(r.stdout, "refuses fragile goods") || !strings.Contains(r.stdout, saga.ReasonUnknownType) {
		t.Fatalf("dlq list table:\n%s", r.stdout)
	}
	w.must(ExitUsage, "dlq", "resubmit", "orders", "--yes") // nothing selected
	w.must(ExitAborted, "dlq", "resubmit", "orders", "--all")

	// The bug is fixed; resubmit the fragile orders. o4 was sent without
	// a MessageID and goes back under one derived from its dead letter;
	// o5's MessageID is still remembered by the queue (sent seconds ago,
	// DuplicateWindow 10m): it is not sent and stays.
	w.broken.Store(false)
	var o4, o5 MessageView
	for _, m := range dls.Messages {
		switch {
		case m.MessageID == "msg-o5":
			o5 = m
		case m.Type == "shop.OrderPlaced":
			o4 = m
		}
	}
	outs := jsonOf[[]DeadLetterOutcome](w, ExitPartial, "dlq", "resubmit", "orders", "--type", "shop.OrderPlaced", "--yes")
	if len(outs) == 2 && outs[0].Seq == o5.Seq {
		outs[0], outs[1] = outs[1], outs[0] // the dead-letter order of o4 and o5 is the dispatcher's
	}
	if len(outs) != 2 || outs[0].Seq != o4.Seq || outs[0].Outcome != "resubmitted" || !strings.HasPrefix(outs[0].SentAs, "resubmit-") ||
		outs[1].Seq != o5.Seq || outs[1].Outcome != "duplicate" || outs[1].SentAs != "msg-o5" {
		t.Fatalf("resubmit: %+v", outs)
	}
	testutil.AwaitTrue(t, 15*time.Second, "o4 placed", func() bool { return w.handledCount("placed/o4") == 1 })

	// A replay of the resubmit (as after a crash between the send and the
	// removal from the dead-letter queue) is deduplicated by the transport.
	q := w.queueHandle("orders")
	var dl4 *transport.Message
	for m, err := range q.DeadLetterQueue().Browse(context.Background(), 0) {
		if err != nil {
			t.Fatal(err)
		}
		if m.Seq == o4.Seq {
			dl4 = m
		}
	}
	if dl4 != nil {
		t.Fatalf("o4 still in the dead-letter queue after its resubmit")
	}
	replay := resubmitMessage(&transport.Message{Body: []byte(`{}`), Seq: o4.Seq, EnqueuedAt: o4.EnqueuedAt, DeadLetterSource: "orders"}, false)
	if replay.MessageID != outs[0].SentAs {
		t.Fatalf("resubmit ID not stable: %s, then %s", outs[0].SentAs, replay.MessageID)
	}
	if res, err := q.Send(context.Background(), replay); err != nil || !res.Duplicate {
		t.Fatalf("replayed resubmit: %+v, %v", res, err)
	}

	// --new-id sends o5 under an ID derived from its dead letter, keeping
	// the old one in a property; a second resubmit finds nothing.
	outs = jsonOf[[]DeadLetterOutcome](w, 0, "dlq", "resubmit", "orders", strconv.FormatUint(o5.Seq, 10), "--new-id", "--yes")
	if len(outs) != 1 || outs[0].Outcome != "resubmitted" || outs[0].SentAs == "msg-o5" {
		t.Fatalf("resubmit --new-id: %+v", outs)
	}
	testutil.AwaitTrue(t, 15*time.Second, "o5 placed", func() bool { return w.handledCount("placed/o5") == 1 })
	w.must(ExitNotFound, "dlq", "resubmit", "orders", strconv.FormatUint(o5.Seq, 10), "--yes")
	if v := jsonOf[InstanceView](w, 0, "sagas", "show", "order", "o5"); len(v.Timeouts) != 2 {
		t.Fatalf("o5 after resubmit: %+v", v)
	}

	// Purge: by filter, then all.
	outs = jsonOf[[]DeadLetterOutcome](w, 0, "dlq", "purge", "orders", "--reason", saga.ReasonUnknownType, "--yes")
	if len(outs) != 1 || outs[0].Outcome != "purged" {
		t.Fatalf("purge --reason: %+v", outs)
	}
	if n := browseCount(t, q.DeadLetterQueue()); n != 0 {
		t.Fatalf("%d dead letters left", n)
	}
	w.send(OrderPlaced{Order: "o6", Fragile: true})
	testutil.AwaitTrue(t, 15*time.Second, "o6 placed", func() bool { return w.handledCount("placed/o6") == 1 })
	w.broken.Store(true)
	w.send(OrderPlaced{Order: "o7", Fragile: true})
	testutil.AwaitTrue(t, 15*time.Second, "o7 dead-lettered", func() bool { return browseCount(t, q.DeadLetterQueue()) >= 1 })
	r = w.must(0, "dlq", "purge", "orders", "--all", "--yes")
	if !strings.Contains(r.stdout, "purged") {
		t.Fatalf("purge --all: %v", r)
	}
	if n := browseCount(t, q.DeadLetterQueue()); n != 0 {
		t.Fatalf("%d dead letters left after purge --all", n)
	}
	// Each order's step ran once: o4 and o5 were resubmitted once each.
	// Six orders were handled (o1-o6); o4, o5 (before the fix) and o7
	// were dead-lettered.
	if got := w.outcomes("shop.OrderPlaced"); got[saga.Handled] != 6 || got[saga.DeadLettered] != 3 || len(got) != 2 {
		t.Errorf("OrderPlaced steps by outcome: %v", got)
	}
	for _, o := range []string{"o1", "o2", "o3", "o4", "o5"} {
		if n := w.handledCount("placed/" + o); n != 1 {
			t.Errorf("order %s placed %d times", o, n)
		}
	}
}

func TestUsageAndHelp(t *testing.T) {
	run := func(args ...string) result {
		var out, errb strings.Builder
		code := Run(context.Background(), args, strings.NewReader(""), &out, &errb)
		return result{out.String(), errb.String(), code}
	}
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"--help"}, 0, "Commands:"},
		{[]string{"help"}, 0, "Exit codes:"},
		{[]string{"help", "dlq", "resubmit"}, 0, "Examples:"},
		{[]string{"dlq", "resubmit", "--help"}, 0, "jetsaga dlq resubmit orders 17 --yes"},
		{[]string{"help", "queues"}, 0, "queues browse"},
		{[]string{}, ExitUsage, ""},
		{[]string{"bogus"}, ExitUsage, ""},
		{[]string{"queues"}, ExitUsage, ""},
		{[]string{"queues", "browse"}, ExitUsage, ""},
		{[]string{"queues", "list", "--nope"}, ExitUsage, ""},
		{[]string{"--server", "", "queues", "list"}, ExitUsage, ""},
		{[]string{"--server", "nats://127.0.0.1:1", "--temporal-address", "t:7233", "timeouts", "list"}, ExitUsage, ""},
	} {
		r := run(c.args...)
		if r.code != c.code || !strings.Contains(r.stdout, c.out) {
			t.Errorf("jetsaga %q: want exit %d and %q in stdout, got %v", c.args, c.code, c.out, r)
		}
	}
	for _, cmd := range commands {
		r := run(append(strings.Fields(cmd.path), "--help")...)
		if r.code != 0 || !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "Exit codes:") {
			t.Errorf("%s --help: %v", cmd.path, r)
		}
	}
	// A server that does not answer is an error (1), not a usage error.
	if r := run("--server", "nats://127.0.0.1:1", "--timeout", "200ms", "queues", "list"); r.code != ExitError {
		t.Errorf("unreachable server: %v", r)
	}
}

func TestParseSeq(t *testing.T) {
	for in, want := range map[string]uint64{
		"5": 5, "0:5": 5, "0:s5": transport.ScheduledBit | 5, "2:7": 2<<48 | 7, "140737488355329": transport.ScheduledBit | 1,
	} {
		got, err := parseSeq(in)
		if err != nil || got != want {
			t.Errorf("parseSeq(%q) = %d, %v; want %d", in, got, err, want)
		}
		if again, _ := parseSeq(transport.FormatSeq(got)); again != got {
			t.Errorf("transport.FormatSeq(%d) = %q does not parse back", got, transport.FormatSeq(got))
		}
	}
	for _, bad := range []string{"", "x", "0:", "0:sx", "70000:1", "-1"} {
		if _, err := parseSeq(bad); err == nil {
			t.Errorf("parseSeq(%q): no error", bad)
		}
	}
}

func compact(t *testing.T, raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A queue is created one stream at a time: `timeouts list` across queues
// can meet one that is not whole yet, and waits for it instead of
// reporting a partial result (it did: "stream not found" with exit 6,
// seen as a flaky test in the Temporal build); a queue that stays
// incomplete is reported.
func TestTimeoutsListWaitsForAQueueBeingCreated(t *testing.T) {
	w := newWorkload(t)
	w.send(OrderPlaced{Order: "o1"})
	testutil.AwaitTrue(t, 15*time.Second, "o1 placed", func() bool { return w.handledCount("placed/o1") == 1 })
	ctx := t.Context()
	cfg := transport.QueueConfig{Name: "half"}
	if _, err := w.broker.OpenQueue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	dlq := w.prefix + "_D_half"
	if err := w.js.DeleteStream(ctx, dlq); err != nil {
		t.Fatal(err)
	}
	// The dead-letter stream comes back while the listing runs.
	recreated := make(chan error, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		b, err := transport.NewJetStream(w.nc, transport.WithPrefix(w.prefix))
		if err == nil {
			_, err = b.OpenQueue(context.Background(), cfg)
		}
		recreated <- err
	}()
	if got := jsonOf[[]PendingView](w, ExitOK, "timeouts", "list", "--saga", "order"); len(got) != 2 {
		t.Errorf("timeouts list while a queue was being completed: %d timeouts, want o1's 2", len(got))
	}
	if err := <-recreated; err != nil {
		t.Fatal(err)
	}
	// A queue that stays incomplete is damaged: reported, after the wait.
	if err := w.js.DeleteStream(ctx, dlq); err != nil {
		t.Fatal(err)
	}
	r := w.run("timeouts", "list", "--saga", "order")
	if r.code != ExitPartial || !strings.Contains(r.stderr, "half") {
		t.Errorf("timeouts list with a damaged queue: %v; want exit %d naming it", r, ExitPartial)
	}
}
