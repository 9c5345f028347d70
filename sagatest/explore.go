package sagatest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// Input is one of the concurrent inputs that Explore delivers in every
// order: a message sent to the dispatcher's queue ([Send]), a timeout
// that is due ([Timeout]), or a redelivery of a message already handled
// ([Redeliver]); and any of the first two with the dispatcher crashing
// in its step ([Crash]), its redelivery one more input.
type Input struct {
	kind  inputKind
	msg   any
	opts  []saga.SendOption
	saga  saga.Saga
	id    string
	types []string // of a Timeout input: the payload's names; nil: any
	crash CrashPoint
}

type inputKind int

const (
	inputSend inputKind = iota + 1
	inputTimeout
	inputRedeliver
)

// Send is an input that sends m to the dispatcher's queue, as Env.Send
// does.
func Send(m any, opts ...saga.SendOption) Input {
	return Input{kind: inputSend, msg: m, opts: opts}
}

// Timeout is an input that delivers the earliest timeout pending for the
// instance of s with this id once setup has run; a second Timeout input
// for the same instance delivers the next one, and so on. Explore moves
// the clock to its due time.
func Timeout(s saga.Saga, id string) Input {
	return Input{kind: inputTimeout, saga: s, id: id}
}

// TimeoutOf is an input that delivers the earliest timeout with payload
// type T (under its name or an alias, saga.Aliased) pending for the
// instance of s with this id once setup has run; a second TimeoutOf[T]
// input for the same instance delivers the next one of type T, and so
// on. Explore moves the clock to its due time.
func TimeoutOf[T any](s saga.Saga, id string) Input {
	t := saga.TypeOf[T]()
	return Input{kind: inputTimeout, saga: s, id: id, types: append([]string{t.Name()}, t.Aliases()...)}
}

// Redeliver is an input that delivers again the last message handled
// before it whose type and encoded body are m's: as the transport does
// when the receiver crashed after the step committed and before it
// settled the message (same MessageID, DeliveryCount 2). If m is also a
// Send input, its redelivery comes after it in every order.
func Redeliver(m any) Input {
	return Input{kind: inputRedeliver, msg: m}
}

// String describes the input, as Explore reports orders.
func (in Input) String() string {
	if in.crash != 0 {
		c := in
		c.crash = 0
		return c.String() + ", crashing " + in.crash.String()
	}
	switch in.kind {
	case inputSend:
		return "send " + describeMessage(saga.JSON{}, in.msg)
	case inputTimeout:
		what := "timeout"
		if len(in.types) > 0 {
			what += " " + in.types[0]
		}
		if in.saga == nil {
			return what + " of <nil saga>/" + in.id
		}
		return what + " of " + in.saga.Name() + "/" + in.id
	case inputRedeliver:
		return "redeliver " + describeMessage(saga.JSON{}, in.msg)
	}
	return "(zero Input)"
}

func describeMessage(c saga.Codec, m any) string {
	body, err := c.Marshal(m)
	if err != nil {
		return messageName(m)
	}
	return messageName(m) + bodySuffix(body)
}

// exploreConfig holds Explore's options.
type exploreConfig struct {
	replay []int // the one order to run; nil: explore
	seed   uint64
	max    int
}

// DefaultOrderings is how many orders Explore runs at most unless
// WithOrderings says otherwise: every order of up to 6 inputs (6! = 720).
const DefaultOrderings = 720

// WithOrderings makes Explore run at most n orders: all of them if there
// are no more, else n different ones drawn with the seed (WithSeed).
func WithOrderings(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("sagatest: WithOrderings(%d): must be at least 1", n)
		}
		c.explore.max = n
		return nil
	})
}

// WithSeed sets the seed from which Explore draws orders when there are
// more than it runs (WithOrderings). Default: 1, so that a test explores
// the same orders on every run; vary it to explore others.
func WithSeed(seed uint64) Option {
	return optionFunc(func(c *config) error {
		c.explore.seed = seed
		return nil
	})
}

// Replay makes Explore run only the order given, as indexes into its
// inputs: the order a failing Explore reports, which this re-runs
// deterministically, e.g. sagatest.Replay(1, 0).
func Replay(order ...int) Option {
	return optionFunc(func(c *config) error {
		if len(order) == 0 {
			return fmt.Errorf("sagatest: Replay(): no order")
		}
		c.explore.replay = slices.Clone(order)
		return nil
	})
}

// Explore runs a scenario once for each order in which its concurrent
// inputs can arrive, each time in a fresh Env, and checks the outcome:
//
//   - setup brings the sagas to the moment before the race, as a test
//     given to Run would (Send, Advance, ...);
//   - inputs then arrive at one instant, one at a time, in the order
//     explored: the current time, or the latest due time of the Timeout
//     inputs (Explore moves the clock there; Timeout inputs due earlier
//     wait for it, and so does whatever else comes due meanwhile, which
//     is handled before the inputs). Each input is handled, with what it
//     causes at that instant (messages the sagas send to their own queue,
//     timeouts due at once), before the next;
//   - check then looks at the outcome, with the Env's assertions or its
//     own, and fails the test if an invariant does not hold.
//
// Explore runs every order if there are at most DefaultOrderings (or
// WithOrderings) of them, else that many drawn with a seed (WithSeed).
// It stops at the first order that fails the test (in check, or in Run's
// checks at the end) and reports it with its journal and the option that
// re-runs it alone, Replay(...) with the order as input indexes. A
// failing order fails the same way every time it is replayed.
//
// A Crash input's step crashes at its CrashPoint, and the message's
// redelivery is explored in every position after it; the report names
// the crash point and the redelivery in the failing order.
//
// Options are Run's, and WithOrderings, WithSeed and Replay. See the
// package documentation for the limits of the bubble.
func Explore(t *testing.T, sagas []saga.Saga, setup func(t *testing.T, env *Env), inputs []Input, check func(t *testing.T, env *Env), opts ...Option) {
	t.Helper()
	cfg, ok := buildConfig(t, sagas, opts)
	if !ok {
		return
	}
	if len(inputs) == 0 {
		t.Fatal("sagatest: Explore: no inputs")
	}
	for i, in := range inputs {
		if in.kind == 0 || in.kind != inputTimeout && in.msg == nil || in.kind == inputTimeout && in.saga == nil {
			t.Fatalf("sagatest: Explore: input %d: %s: nothing to deliver", i, in)
		}
		if in.crash != 0 && (in.kind == inputRedeliver || in.crash < BeforeCommit || in.crash > AfterCallIntent) {
			t.Fatalf("sagatest: Explore: input %d: %s: Crash takes a Send or a Timeout input and a CrashPoint", i, in)
		}
	}
	codec := cfg.codec
	if codec == nil {
		codec = saga.JSON{}
	}
	where := ""
	if _, file, line, ok := runtime.Caller(1); ok {
		where = fmt.Sprintf(" at %s:%d", filepath.Base(file), line)
	}
	after := redeliveryConstraints(codec, inputs)
	crashes := crashSlots(inputs)
	after = append(after, crashes...) // a crash's redelivery after its input
	orders, total := cfg.explore.orders(len(after), after)
	if cfg.explore.replay != nil {
		if err := validOrder(cfg.explore.replay, after); err != nil {
			t.Fatalf("sagatest: Explore: Replay%s: %v", formatOrder(cfg.explore.replay), err)
		}
		orders, total = [][]int{cfg.explore.replay}, 1
	}
	for k, order := range orders {
		failed := false
		synctest.Test(t, func(t *testing.T) {
			t.Helper()
			var e *Env
			report := func() {
				t.Helper()
				if failed || !t.Failed() {
					return
				}
				failed = true
				var sb strings.Builder
				fmt.Fprintf(&sb, "sagatest: Explore%s: order %d of %d failed:\n", where, k+1, total)
				for i, idx := range order {
					var what string
					if idx < len(inputs) {
						what = inputs[idx].String()
					} else {
						c := crashes[idx-len(inputs)]
						what = fmt.Sprintf("redelivery of input %d after its crash %s", c, inputs[c].crash)
					}
					if e != nil && e.inputs[idx] != "" {
						what = e.inputs[idx]
					}
					fmt.Fprintf(&sb, "  %d. %s\n", i+1, what)
				}
				fmt.Fprintf(&sb, "re-run it alone with the option sagatest.Replay%s\n", formatOrder(order))
				if e != nil {
					sb.WriteString(e.journalSection())
				}
				t.Errorf("%s", sb.String())
			}
			// Registered first, so that it runs after Run's checks.
			t.Cleanup(report)
			e = newEnv(t, sagas, cfg)
			setup(t, e)
			e.settle()
			if t.Failed() {
				return
			}
			e.deliver(inputs, order)
			e.settle()
			check(t, e)
			e.settle()
			report()
		})
		if failed {
			return
		}
	}
}

// formatOrder formats an order as Replay's arguments: (2, 0, 1).
func formatOrder(order []int) string {
	s := make([]string, len(order))
	for i, v := range order {
		s[i] = strconv.Itoa(v)
	}
	return "(" + strings.Join(s, ", ") + ")"
}

// redeliveryConstraints returns, for each input, the index of the input
// it must come after (a Redeliver after the Send of the same message), or
// -1.
func redeliveryConstraints(c saga.Codec, inputs []Input) []int {
	after := make([]int, len(inputs))
	for i, in := range inputs {
		after[i] = -1
		if in.kind != inputRedeliver {
			continue
		}
		body, err := c.Marshal(in.msg)
		if err != nil {
			continue
		}
		for j, o := range inputs {
			if o.kind != inputSend || messageName(o.msg) != messageName(in.msg) {
				continue
			}
			if ob, err := c.Marshal(o.msg); err == nil && bytes.Equal(ob, body) {
				after[i] = j
			}
		}
	}
	return after
}

// validOrder checks that order is a permutation of the inputs that keeps
// the constraints.
func validOrder(order []int, after []int) error {
	if len(order) != len(after) {
		return fmt.Errorf("%d indexes for %d inputs", len(order), len(after))
	}
	pos := make([]int, len(order))
	seen := make([]bool, len(order))
	for i, v := range order {
		if v < 0 || v >= len(order) || seen[v] {
			return fmt.Errorf("not an order of the inputs 0 to %d", len(order)-1)
		}
		seen[v], pos[v] = true, i
	}
	for i, a := range after {
		if a >= 0 && pos[i] < pos[a] {
			return fmt.Errorf("input %d (a redelivery) comes before input %d, the message it redelivers", i, a)
		}
	}
	return nil
}

// orders returns the orders to run and how many valid orders there are
// (or, when drawing, how many are drawn).
func (c exploreConfig) orders(n int, after []int) ([][]int, int) {
	limit := cmpOr(c.max, DefaultOrderings)
	var all [][]int
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	// Enumerate in lexicographic order while there are at most limit.
	for {
		if validOrder(perm, after) == nil {
			if len(all) == limit {
				all = nil
				break
			}
			all = append(all, slices.Clone(perm))
		}
		if !nextPermutation(perm) {
			return all, len(all)
		}
	}
	// Too many: draw limit different valid orders.
	rng := rand.New(rand.NewPCG(cmpOr(c.seed, 1), 0x5a6a_7e57))
	seen := make(map[string]bool)
	for tries := 0; len(all) < limit && tries < 100*limit; tries++ {
		p := rng.Perm(n)
		fixOrder(p, after)
		if key := fmt.Sprint(p); !seen[key] {
			seen[key] = true
			all = append(all, p)
		}
	}
	return all, len(all)
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// nextPermutation rearranges p into the next permutation in lexicographic
// order, reporting false after the last.
func nextPermutation(p []int) bool {
	i := len(p) - 2
	for i >= 0 && p[i] >= p[i+1] {
		i--
	}
	if i < 0 {
		return false
	}
	j := len(p) - 1
	for p[j] <= p[i] {
		j--
	}
	p[i], p[j] = p[j], p[i]
	slices.Reverse(p[i+1:])
	return true
}

// fixOrder moves each redelivery that comes before the message it
// redelivers to just after it.
func fixOrder(p []int, after []int) {
	for changed := true; changed; {
		changed = false
		for i, a := range after {
			if a < 0 {
				continue
			}
			pi, pa := slices.Index(p, i), slices.Index(p, a)
			if pi < pa {
				copy(p[pi:pa], p[pi+1:pa+1]) // shift left the ones between
				p[pa] = i
				changed = true
			}
		}
	}
}

// deliver runs the inputs in order, at one instant.
func (e *Env) deliver(inputs []Input, order []int) {
	e.t.Helper()
	e.setExploring(true) // it holds timeouts itself: no fair batches
	defer e.setExploring(false)
	// Resolve the Timeout inputs to pending timeouts.
	type due struct {
		p    saga.PendingTimeout
		what string
	}
	dues := make(map[int]due)
	e.inputs = make(map[int]string)
	chosen := make(map[saga.TimeoutHandle]bool)
	now := time.Now()
	first, last := now, now
	for i, in := range inputs {
		if in.kind != inputTimeout {
			continue
		}
		key := instanceKey{in.saga.Name(), in.id}
		pending := e.Timeouts(in.saga, in.id)
		what := ""
		if len(in.types) > 0 {
			what = " of type " + in.types[0]
			pending = slices.DeleteFunc(pending, func(p saga.PendingTimeout) bool { return !slices.Contains(in.types, p.Type) })
		}
		j := slices.IndexFunc(pending, func(p saga.PendingTimeout) bool { return !chosen[p.Handle] })
		if j < 0 {
			e.t.Fatalf("sagatest: Explore: input %d, %s: after setup the instance has %d pending timeout(s)%s, all named by earlier inputs\n%s",
				i, in, len(pending), what, e.journalSection())
			return
		}
		p := pending[j]
		chosen[p.Handle] = true
		dues[i] = due{p: p, what: fmt.Sprintf("timeout %s of %s/%s, due %s", p.Type, key.saga, key.id, e.offset(p.At))}
		e.inputs[i] = dues[i].what
		if first.Equal(now) || p.At.Before(first) {
			first = p.At
		}
		if p.At.After(last) {
			last = p.At
		}
	}
	if first.After(now) {
		time.Sleep(first.Sub(now) - time.Nanosecond) // what is due before the first input
		e.settle()
	}
	e.pause()
	time.Sleep(time.Until(last))
	synctest.Wait() // the activations due by now

	// Take what came due: the Timeout inputs are held for their turn,
	// anything else is handled now.
	held := make(map[int]*transport.Delivery)
	for _, del := range e.takeActive() {
		i := -1
		for j, d := range dues {
			if string(d.p.Handle) == del.MessageID {
				i = j
			}
		}
		if i >= 0 {
			held[i] = del
			continue
		}
		e.mu.Lock()
		e.steps, e.caller = 0, "Explore, before its inputs"
		e.mu.Unlock()
		e.handle(del)
		synctest.Wait()
	}
	e.resume()
	e.settle()

	e.record(0, time.Now(), "explore: inputs in the order "+formatOrder(order))
	crashes := crashSlots(inputs)
	crashed := make(map[int]*crashedDelivery) // by input
	for _, i := range order {
		if i >= len(inputs) {
			c := crashes[i-len(inputs)]
			e.mu.Lock()
			e.steps, e.caller = 0, fmt.Sprintf("Explore input %d (redelivery of input %d after its crash %s)", i, c, inputs[c].crash)
			e.mu.Unlock()
			if cd := crashed[c]; cd != nil {
				e.inputs[i] = fmt.Sprintf("redelivery of input %d (MessageID %s) after its crash %s", c, cd.del.MessageID, cd.point)
			}
			e.redeliverCrashed(crashed[c])
			e.settle()
			continue
		}
		in := inputs[i]
		e.mu.Lock()
		e.steps, e.caller = 0, fmt.Sprintf("Explore input %d (%s)", i, in)
		e.mu.Unlock()
		switch in.kind {
		case inputSend:
			if in.crash != 0 {
				crashed[i] = e.sendCrashing(in)
				break
			}
			e.send(in.msg, in.opts)
		case inputTimeout:
			del := held[i]
			if del == nil {
				e.record(0, time.Now(), fmt.Sprintf("explore: %s: no longer scheduled", dues[i].what))
				break
			}
			e.record(0, time.Now(), "explore: "+dues[i].what)
			e.pause()
			if in.crash != 0 {
				crashed[i] = e.handleCrashing(del, in.crash, dues[i].what)
			} else {
				e.handle(del)
			}
			e.resume()
		case inputRedeliver:
			e.redeliver(in.msg)
		}
		e.settle()
	}
}

// takeActive receives every message now active on the dispatcher's
// queue; the receive loop is paused.
func (e *Env) takeActive() []*transport.Delivery {
	e.t.Helper()
	n := 0
	for m, err := range e.q.Browse(e.ctx, 0) {
		if err != nil {
			e.t.Fatalf("sagatest: browsing %s: %v", Queue, err)
			return nil
		}
		if m.State == transport.Active {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	ds, err := e.q.Receive(e.ctx, n)
	if err != nil {
		e.t.Fatalf("sagatest: receiving from %s: %v", Queue, err)
	}
	slices.SortFunc(ds, func(a, b *transport.Delivery) int { return compareUint(a.Seq, b.Seq) })
	return ds
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// redeliver delivers again the last handled message of m's type and
// body, through a queue of its own (the dispatcher settles it there), as
// a second delivery.
func (e *Env) redeliver(m any) {
	e.t.Helper()
	body, err := e.codec.Marshal(m)
	if err != nil {
		e.t.Fatalf("sagatest: Redeliver(%T): %v", m, err)
		return
	}
	name := messageName(m)
	e.mu.Lock()
	var orig *transport.Message
	for _, h := range slices.Backward(e.handled) {
		if h.Properties[saga.TypeProperty] == name && bytes.Equal(h.Body, body) {
			orig = h
			break
		}
	}
	e.mu.Unlock()
	if orig == nil {
		e.t.Fatalf("sagatest: Redeliver(%s%s): no such message was handled before\n%s", name, bodySuffix(body), e.journalSection())
		return
	}
	e.redeliverCopy(orig)
}

// redeliverCopy delivers orig again, through a queue of its own (the
// dispatcher settles it there), as a second delivery.
func (e *Env) redeliverCopy(orig *transport.Message) {
	e.t.Helper()
	e.mu.Lock()
	e.redelivery++
	n := e.redelivery
	e.mu.Unlock()
	name, body := orig.Properties[saga.TypeProperty], orig.Body
	q, err := e.b.OpenQueue(e.ctx, transport.QueueConfig{Name: fmt.Sprintf("%s-redelivery-%d", Queue, n)})
	if err != nil {
		e.t.Fatalf("sagatest: Redeliver: %v", err)
		return
	}
	c := &transport.Message{
		Body: orig.Body, ContentType: orig.ContentType, MessageID: orig.MessageID,
		CorrelationID: orig.CorrelationID, ReplyTo: orig.ReplyTo, SessionID: orig.SessionID,
		Properties: orig.Properties,
	}
	if _, err := q.Send(e.ctx, c); err != nil {
		e.t.Fatalf("sagatest: Redeliver: %v", err)
		return
	}
	ctx := context.Background()
	ds, err := q.Receive(ctx, 1)
	if err == nil {
		err = ds[0].Abandon(ctx) // the first delivery, whose receiver "crashed"
	}
	if err == nil {
		ds, err = q.Receive(ctx, 1)
	}
	if err != nil {
		e.t.Fatalf("sagatest: Redeliver: %v", err)
		return
	}
	e.record(0, time.Now(), fmt.Sprintf("explore: redelivered %s%s (MessageID %s, delivery %d)", name, bodySuffix(body), orig.MessageID, ds[0].DeliveryCount))
	e.pause()
	e.handle(ds[0])
	e.resume()
}
