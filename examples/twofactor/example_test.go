package twofactor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/jetsaga/jetsaga/examples/twofactor"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

// The flow in one process, on the in-memory transport and store; a service
// uses NATS JetStream and saga/kvstore instead (see the demo). Codes live
// their 5 minutes; the in-memory broker runs on a clock the example moves
// 5 minutes ahead once ann is done, so that bob's code expires then, and
// ann's cannot expire before she enters it, however slow the machine.
func Example() {
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	clock := &skipClock{}
	broker, err := transport.NewMemory(transport.WithClock(clock))
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()
	flow := twofactor.New(twofactor.Config{
		TTL:     5 * time.Minute,
		NewCode: func() string { return "123456" },
	})
	d, err := saga.NewDispatcher(broker, memstore.New(), "auth", saga.WithSagas(flow))
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	// The user's service sends commands through the dispatcher and reads
	// the flow's events from the "auth-events" queue.
	events, err := broker.Queue(ctx, "auth-events")
	if err != nil {
		log.Fatal(err)
	}
	send := func(m any) {
		if _, err := d.Send(ctx, m); err != nil {
			log.Fatal(err)
		}
	}
	next := func() string { // waits for the next event and describes it
		ds, err := events.Receive(ctx, 1)
		if err != nil {
			log.Fatal(err)
		}
		m := ds[0]
		if err := m.Complete(ctx); err != nil {
			log.Fatal(err)
		}
		switch m.Properties[saga.TypeProperty] {
		case saga.MessageName[twofactor.CodeIssued]():
			var e twofactor.CodeIssued
			_ = json.Unmarshal(m.Body, &e)
			return fmt.Sprintf("%s: code %s issued to %s", e.Login, e.Code, e.User)
		case saga.MessageName[twofactor.CodeRejected]():
			var e twofactor.CodeRejected
			_ = json.Unmarshal(m.Body, &e)
			return fmt.Sprintf("%s: wrong code, %d attempts left", e.Login, e.Remaining)
		case saga.MessageName[twofactor.Verified]():
			var e twofactor.Verified
			_ = json.Unmarshal(m.Body, &e)
			return fmt.Sprintf("%s: %s verified", e.Login, e.User)
		case saga.MessageName[twofactor.Failed]():
			var e twofactor.Failed
			_ = json.Unmarshal(m.Body, &e)
			return fmt.Sprintf("%s: %s failed: %s", e.Login, e.User, e.Reason)
		}
		return "unexpected " + m.Properties[saga.TypeProperty]
	}

	send(twofactor.CodeRequested{Login: "l1", User: "ann"})
	fmt.Println(next())
	send(twofactor.CodeEntered{Login: "l1", Code: "000000"})
	fmt.Println(next())
	send(twofactor.CodeEntered{Login: "l1", Code: "123456"})
	fmt.Println(next())

	send(twofactor.CodeRequested{Login: "l2", User: "bob"})
	fmt.Println(next())
	clock.Skip(5 * time.Minute) // bob never enters the code
	fmt.Println(next())

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// l1: code 123456 issued to ann
	// l1: wrong code, 2 attempts left
	// l1: ann verified
	// l2: code 123456 issued to bob
	// l2: bob failed: expired
}

// skipClock is real time plus the jumps Skip makes: the scheduled messages
// of the in-memory broker that the jump makes due (bob's expiry) are
// delivered at once. (The dispatcher keeps its own, real, clock: a code
// entered is checked against it.)
type skipClock struct {
	mu     sync.Mutex
	ahead  time.Duration
	timers map[*skipTimer]struct{}
}

type skipTimer struct {
	at time.Time
	f  func()
	t  *time.Timer
}

func (c *skipClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.ahead)
}

func (c *skipClock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timers == nil {
		c.timers = make(map[*skipTimer]struct{})
	}
	st := &skipTimer{at: time.Now().Add(c.ahead + d), f: f}
	st.t = time.AfterFunc(d, func() { c.fire(st) })
	c.timers[st] = struct{}{}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.timers[st]; !ok {
			return false
		}
		delete(c.timers, st)
		st.t.Stop()
		return true
	}
}

// fire calls st's function unless it was stopped or called already.
func (c *skipClock) fire(st *skipTimer) {
	c.mu.Lock()
	_, ok := c.timers[st]
	delete(c.timers, st)
	c.mu.Unlock()
	if ok {
		st.f()
	}
}

// Skip moves the clock d ahead and fires the timers that came due, each in
// a goroutine of its own.
func (c *skipClock) Skip(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ahead += d
	now := time.Now().Add(c.ahead)
	for st := range c.timers {
		if !st.at.After(now) {
			st.t.Stop()
			go c.fire(st)
		}
	}
}
