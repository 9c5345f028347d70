package cli

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// topicWorkload adds to the demo workload a topic "events" (filter
// property region) with three subscriptions: billing (Subject
// shop.Invoice), eu (region=eu) and orders-0badf00d (every message; named
// as a saga endpoint of queue orders names its subscription). Three
// messages are sent and two scheduled; one OrderPlaced event is
// dead-lettered from orders-0badf00d.
type topicWorkload struct {
	*workload
	topic       *transport.Topic
	subs        map[string]*transport.Subscription
	scheduled   []uint64
	deadLetters int
}

const endpointSub = "orders-0badf00d"

func setUpTopic(t *testing.T) *topicWorkload {
	w := &topicWorkload{workload: newWorkload(t), subs: map[string]*transport.Subscription{}}
	ctx := context.Background()
	var err error
	w.topic, err = w.broker.OpenTopic(ctx, transport.TopicConfig{Name: "events", FilterProperties: []string{"region"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]transport.Filter{
		"billing":   {Subjects: []string{"shop.Invoice"}},
		"eu":        {Properties: map[string]string{"region": "eu"}},
		endpointSub: {},
	} {
		if w.subs[name], err = w.topic.OpenSubscription(ctx, name, transport.SubscriptionConfig{Filter: f}); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range []*transport.Message{
		{Subject: "shop.Invoice", MessageID: "inv-1", Properties: map[string]string{"region": "eu"}, Body: []byte(`{"n":1}`)},
		{Subject: "shop.Invoice", MessageID: "inv-2", Properties: map[string]string{"region": "us"}, Body: []byte(`{"n":2}`)},
		{Subject: "shop.OrderPlaced", MessageID: "evt-o9", Body: []byte(`{"Order":"o9"}`),
			Properties: map[string]string{"region": "eu", saga.TypeProperty: "shop.OrderPlaced"}},
	} {
		if _, err := w.topic.Send(ctx, m); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for i := range 2 {
		seq, err := w.topic.Schedule(ctx, &transport.Message{Subject: "shop.Reminder", MessageID: "rem-" + strconv.Itoa(i),
			Body: []byte(`{"later":true}`)}, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		w.scheduled = append(w.scheduled, seq)
	}
	// orders-0badf00d gets all three; dead-letter the OrderPlaced event.
	testutil.AwaitTrue(t, 15*time.Second, "the endpoint subscription's three messages", func() bool {
		c, err := w.subs[endpointSub].Counts(ctx)
		return err == nil && c.Active == 3
	})
	for w.deadLetters == 0 {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ds, err := w.subs[endpointSub].Receive(rctx, 3)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.MessageID == "evt-o9" {
				if err := d.DeadLetter(ctx, "HandlerPanicked", "order o9: boom"); err != nil {
					t.Fatal(err)
				}
				w.deadLetters++
			} else if err := d.Abandon(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	return w
}

func subByName(ti TopicInfo, name string) (SubscriptionInfo, bool) {
	for _, s := range ti.Subscriptions {
		if s.Name == name {
			return s, true
		}
	}
	return SubscriptionInfo{}, false
}

func TestTopics(t *testing.T) {
	w := setUpTopic(t)

	// topics list: counts from the server, filters as declared.
	var ti TopicInfo
	testutil.AwaitTrue(t, 15*time.Second, "topic counts", func() bool {
		ts := jsonOf[[]TopicInfo](w.workload, 0, "topics", "list")
		if len(ts) != 1 {
			t.Fatalf("topics list: %+v", ts)
		}
		ti = ts[0]
		b, _ := subByName(ti, "billing")
		eu, _ := subByName(ti, "eu")
		ep, _ := subByName(ti, endpointSub)
		return ti.Scheduled == 2 && b.Active == 2 && eu.Active == 2 && ep.Active == 2 && ep.DeadLettered == 1
	})
	if ti.Name != "events" || ti.Partitions != 1 || strings.Join(ti.FilterProperties, ",") != "region" || len(ti.Subscriptions) != 3 {
		t.Fatalf("topic: %+v", ti)
	}
	if b, _ := subByName(ti, "billing"); b.Path != "events/Subscriptions/billing" || b.Filter.String() != "Subject=shop.Invoice" {
		t.Fatalf("billing: %+v", b)
	}
	if eu, _ := subByName(ti, "eu"); eu.Filter.String() != "region=eu" {
		t.Fatalf("eu: %+v", eu)
	}
	r := w.must(0, "topics", "list")
	for _, line := range []string{`^events\s+1\s+\d+\s+-\s+2\s+-\s+region$`, `^\s+events/Subscriptions/billing\s+-\s+2\s+\d+\s+-\s+0\s+Subject=shop.Invoice$`,
		`^\s+events/Subscriptions/orders-0badf00d\s+-\s+2\s+\d+\s+-\s+1\s+all$`} {
		if !regexpLine(r.stdout, line) {
			t.Fatalf("topics list table: no line %s\n%s", line, r.stdout)
		}
	}

	// Browse and peek the topic's scheduled messages; cancel one.
	page := jsonOf[BrowsePage](w.workload, 0, "topics", "browse", "events", "--state", "scheduled")
	if len(page.Messages) != 2 || page.Messages[0].Seq != w.scheduled[0] || page.Messages[0].State != "scheduled" ||
		page.Messages[0].MessageID != "rem-0" || page.Messages[0].ScheduledAt == nil {
		t.Fatalf("topics browse: %+v", page)
	}
	pk := jsonOf[BrowsePage](w.workload, 0, "topics", "peek", "events", transport.FormatSeq(w.scheduled[1]))
	if len(pk.Messages) != 1 || pk.Messages[0].Body == nil || *pk.Messages[0].Body != `{"later":true}` || pk.Messages[0].Subject != "shop.Reminder" {
		t.Fatalf("topics peek: %+v", pk)
	}
	outs := jsonOf[[]CancelOutcome](w.workload, 0, "topics", "cancel", "events", strconv.FormatUint(w.scheduled[0], 10), "--yes")
	if len(outs) != 1 || outs[0].Outcome != "cancelled" {
		t.Fatalf("topics cancel: %+v", outs)
	}
	w.must(ExitNotFound, "topics", "cancel", "events", strconv.FormatUint(w.scheduled[0], 10), "--yes")
	w.must(ExitAborted, "topics", "cancel", "events", strconv.FormatUint(w.scheduled[1], 10))
	if page := jsonOf[BrowsePage](w.workload, 0, "topics", "browse", "events", "--state", "scheduled"); len(page.Messages) != 1 {
		t.Fatalf("after cancel: %+v", page)
	}

	// A subscription browses like a queue, with the topic's numbers.
	sp := jsonOf[BrowsePage](w.workload, 0, "queues", "browse", "events/Subscriptions/billing")
	if sp.Queue != "events/Subscriptions/billing" || len(sp.Messages) != 2 || sp.Messages[0].MessageID != "inv-1" || sp.Messages[1].MessageID != "inv-2" {
		t.Fatalf("subscription browse: %+v", sp)
	}
	if eu := jsonOf[BrowsePage](w.workload, 0, "queues", "browse", "events/Subscriptions/eu"); len(eu.Messages) != 2 ||
		eu.Messages[0].MessageID != "inv-1" || eu.Messages[1].MessageID != "evt-o9" {
		t.Fatalf("eu browse: %+v", eu)
	}

	// Missing and malformed names.
	w.must(ExitNotFound, "topics", "browse", "nosuch")
	w.must(ExitNotFound, "queues", "browse", "events/Subscriptions/nosuch")
	w.must(ExitNotFound, "dlq", "list", "nosuch/Subscriptions/billing")
	w.must(ExitUsage, "queues", "browse", "ev.*/Subscriptions/billing")
	w.must(ExitUsage, "topics", "browse", "ev>")
}

func TestTopicDeadLetters(t *testing.T) {
	w := setUpTopic(t)
	path := "events/Subscriptions/" + endpointSub

	dl := jsonOf[BrowsePage](w.workload, 0, "dlq", "list", path)
	if len(dl.Messages) != 1 || dl.Messages[0].DeadLetterReason != "HandlerPanicked" || dl.Messages[0].MessageID != "evt-o9" ||
		dl.Messages[0].State != "dead-lettered" {
		t.Fatalf("dlq list: %+v", dl)
	}
	// A subscription's dead letters need a destination; the error names
	// the endpoint's queue.
	r := w.must(ExitUsage, "dlq", "resubmit", path, "--all", "--yes")
	if !strings.Contains(r.stderr, "--to orders") || !strings.Contains(r.stderr, "--to-topic events") {
		t.Fatalf("resubmit without destination: %v", r)
	}
	w.must(ExitUsage, "dlq", "resubmit", path, "--all", "--yes", "--to", "orders", "--to-topic", "events")
	w.must(ExitNotFound, "dlq", "resubmit", path, "--all", "--yes", "--to", "nosuch")

	// To the endpoint's queue, under its MessageID: the saga handles it once.
	outs := jsonOf[[]DeadLetterOutcome](w.workload, 0, "dlq", "resubmit", path, "--all", "--to", "orders", "--yes")
	if len(outs) != 1 || outs[0].Outcome != "resubmitted" || outs[0].SentTo != "orders" || outs[0].SentAs != "evt-o9" || outs[0].Queue != path {
		t.Fatalf("resubmit: %+v", outs)
	}
	testutil.AwaitTrue(t, 15*time.Second, "o9 placed", func() bool { return w.handledCount("placed/o9") == 1 })
	if dl := jsonOf[BrowsePage](w.workload, 0, "dlq", "list", path); len(dl.Messages) != 0 {
		t.Fatalf("dlq after resubmit: %+v", dl)
	}

	// --to-topic: every subscription whose filter passes gets it again.
	ctx := context.Background()
	deadLetter(t, w.subs["billing"], "inv-2")
	outs = jsonOf[[]DeadLetterOutcome](w.workload, 0, "dlq", "resubmit", "events/Subscriptions/billing", "--all", "--to-topic", "events", "--yes", "--new-id")
	if len(outs) != 1 || outs[0].Outcome != "resubmitted" || outs[0].SentTo != "topic events" {
		t.Fatalf("resubmit to topic: %+v", outs)
	}
	testutil.AwaitTrue(t, 15*time.Second, "the resubmitted invoice in billing", func() bool {
		c, err := w.subs["billing"].Counts(ctx)
		return err == nil && c.Active == 2 && c.DeadLettered == 0
	})

	// Purge: all at once, and by sequence number.
	deadLetter(t, w.subs["eu"], "inv-1")
	deadLetter(t, w.subs["eu"], "evt-o9")
	eu := jsonOf[BrowsePage](w.workload, 0, "dlq", "list", "events/Subscriptions/eu")
	if len(eu.Messages) != 2 {
		t.Fatalf("eu dead letters: %+v", eu)
	}
	po := jsonOf[[]DeadLetterOutcome](w.workload, 0, "dlq", "purge", "events/Subscriptions/eu", strconv.FormatUint(eu.Messages[0].Seq, 10), "--yes")
	if len(po) != 1 || po[0].Outcome != "purged" {
		t.Fatalf("purge one: %+v", po)
	}
	r = w.must(0, "dlq", "purge", "events/Subscriptions/eu", "--all", "--yes")
	if !strings.Contains(r.stdout, "purged 1 dead letters of events/Subscriptions/eu") {
		t.Fatalf("purge all: %v", r)
	}
	if c, err := w.subs["eu"].Counts(ctx); err != nil || c.DeadLettered != 0 {
		t.Fatalf("eu counts after purge: %+v %v", c, err)
	}
}

// deadLetter receives the message with id from s and dead-letters it,
// abandoning the others.
func deadLetter(t *testing.T, s *transport.Subscription, id string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ds, err := s.Receive(rctx, 10)
		cancel()
		if err != nil {
			continue
		}
		found := false
		for _, d := range ds {
			if d.MessageID == id {
				if err := d.DeadLetter(ctx, "Test", "dead-lettered by the test"); err != nil {
					t.Fatal(err)
				}
				found = true
			} else if err := d.Abandon(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if found {
			return
		}
	}
	t.Fatalf("%s: no message %s received", s.Path(), id)
}

func TestConsoleTopics(t *testing.T) {
	w := setUpTopic(t)
	srv := w.console("", true)
	c := client(t)

	code, body := get(t, c, srv.URL+"/")
	if code != 200 || !strings.Contains(body, `href="/topics/events"`) ||
		!strings.Contains(body, `href="/topics/events/subscriptions/`+endpointSub+`?state=dead"`) {
		t.Fatalf("overview: %d\n%s", code, body)
	}
	code, body = get(t, c, srv.URL+"/topics/events?state=scheduled")
	if code != 200 || strings.Count(body, `class="cancel"`) != 2 || strings.Count(body, `class="sub"`) != 3 ||
		!strings.Contains(body, "Subject=shop.Invoice") {
		t.Fatalf("topic page: %d\n%s", code, body)
	}
	csrf := csrfRe.FindStringSubmatch(body)[1]
	code, loc := post(t, c, srv.URL+"/topics/events/cancel", url.Values{"csrf": {csrf}, "seq": {strconv.FormatUint(w.scheduled[1], 10)}})
	if code != http.StatusSeeOther || !strings.Contains(loc, "cancelled") {
		t.Fatalf("cancel on topic: %d %s", code, loc)
	}
	if n := browseScheduled(t, w.topic); n != 1 {
		t.Fatalf("scheduled after console cancel: %d", n)
	}

	// The endpoint subscription's dead letter goes back to queue orders.
	code, body = get(t, c, srv.URL+"/topics/events/subscriptions/"+endpointSub+"?state=dead")
	if code != 200 || strings.Count(body, `class="resubmit"`) != 1 || !strings.Contains(body, "HandlerPanicked") {
		t.Fatalf("subscription dead page: %d\n%s", code, body)
	}
	seq := regexp.MustCompile(`name="seq" value="(\d+)"`).FindStringSubmatch(body)[1]
	code, loc = post(t, c, srv.URL+"/topics/events/subscriptions/"+endpointSub+"/resubmit", url.Values{"csrf": {csrf}, "seq": {seq}})
	if code != http.StatusSeeOther || !strings.Contains(loc, "resubmitted+to+orders") {
		t.Fatalf("resubmit: %d %s", code, loc)
	}
	testutil.AwaitTrue(t, 15*time.Second, "o9 placed", func() bool { return w.handledCount("placed/o9") == 1 })

	// A plain subscription offers no resubmit; its page says how.
	deadLetter(t, w.subs["billing"], "inv-1")
	_, body = get(t, c, srv.URL+"/topics/events/subscriptions/billing?state=dead")
	if strings.Count(body, `class="resubmit"`) != 0 || !strings.Contains(body, "--to QUEUE") {
		t.Fatalf("plain subscription dead page:\n%s", body)
	}
	if code, loc := post(t, c, srv.URL+"/topics/events/subscriptions/billing/resubmit", url.Values{"csrf": {csrf}, "seq": {seq}}); code != http.StatusSeeOther ||
		!strings.Contains(loc, "not+a+saga+endpoint") {
		t.Fatalf("resubmit on a plain subscription: %d %s", code, loc)
	}
	if code, _ := get(t, c, srv.URL+"/topics/nosuch"); code != http.StatusNotFound {
		t.Fatalf("missing topic: %d", code)
	}
	if code, _ := get(t, c, srv.URL+"/topics/events/subscriptions/nosuch"); code != http.StatusNotFound {
		t.Fatalf("missing subscription: %d", code)
	}
}

func browseScheduled(t *testing.T, tp *transport.Topic) int {
	t.Helper()
	n := 0
	for m, err := range tp.Browse(context.Background(), 0) {
		if err != nil {
			t.Fatal(err)
		}
		if m.State == transport.Scheduled {
			n++
		}
	}
	return n
}
