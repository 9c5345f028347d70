// Package payment is a saga that charges each order once through an HTTP
// payment service, with saga.Call: the call's key is the request's
// Idempotency-Key, the same on every run of the step, so that a worker
// killed mid-call, or an answer lost on the wire, never charges twice.
//
// The payment service (Provider) honours idempotency keys the way
// Stripe's API does: a POST /charges with a key it has seen within its key
// window (24 hours) answers with the first charge, and charges nothing.
// The demo (go run ./examples/payment/demo) runs three worker processes
// that it kills at random while they charge.
package payment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

// Messages and state.
type (
	// Checkout starts a payment for an order.
	Checkout struct {
		Order  string
		Amount int // cents
	}
	// Paid is what the saga sends to Queue's "paid" queue once the order is
	// charged.
	Paid struct {
		Order  string
		Charge Charge
	}
	// Charge is the payment service's answer.
	Charge struct {
		ID     string
		Order  string
		Amount int
	}
	state struct{ Charge Charge }
)

// Queue is the saga's queue; PaidQueue receives the Paid events.
const (
	Queue     = "payments"
	PaidQueue = "paid"
)

// KeyWindow is how long the payment service remembers an idempotency key.
const KeyWindow = 24 * time.Hour

// Saga returns the payment saga, which charges through the service at
// url with client.
func Saga(client *http.Client, url string) *saga.Definition[state] {
	d := saga.Define[state]("payment")
	saga.StartedBy(d, saga.By(func(m Checkout) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[state], m Checkout) error {
			ch, err := saga.Call(ctx, c, "charge", func(ctx context.Context, key string) (Charge, error) {
				return charge(ctx, client, url, key, m)
			}, saga.RetryWithin(KeyWindow))
			if err != nil {
				return err // retried; the next run sends the same key
			}
			c.Data.Charge = ch
			c.MarkComplete()
			return c.Send(PaidQueue, Paid{Order: m.Order, Charge: ch})
		})
	return d
}

// charge asks the payment service at url to charge m under key.
func charge(ctx context.Context, client *http.Client, url, key string, m Checkout) (Charge, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return Charge{}, saga.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/charges", bytes.NewReader(body))
	if err != nil {
		return Charge{}, saga.Permanent(err)
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return Charge{}, fmt.Errorf("payment service: %w", err) // the outcome unknown: retried with the key
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("payment service: %s: %s", resp.Status, b)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return Charge{}, saga.Permanent(err) // refused: calling again changes nothing
		}
		return Charge{}, err
	}
	var ch Charge
	if err := json.NewDecoder(resp.Body).Decode(&ch); err != nil {
		return Charge{}, fmt.Errorf("payment service: its answer: %w", err)
	}
	return ch, nil
}

// Provider is the payment service: POST /charges with an Idempotency-Key
// header charges once per key; a repeat gets the first charge. DropRate
// of the answers are lost after the charge (the connection closed
// without a response), as on a flaky network.
type Provider struct {
	DropRate float64

	mu      sync.Mutex
	charges map[string]Charge // by key
	byOrder map[string]int
	dropped int
}

// NewProvider returns a payment service with no charges.
func NewProvider() *Provider {
	return &Provider{charges: map[string]Charge{}, byOrder: map[string]int{}}
}

func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/charges" {
		http.NotFound(w, r)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	var m Checkout
	if key == "" || json.NewDecoder(r.Body).Decode(&m) != nil {
		http.Error(w, "an Idempotency-Key and a JSON checkout are required", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	ch, seen := p.charges[key]
	if !seen {
		ch = Charge{ID: fmt.Sprintf("ch_%d", len(p.charges)+1), Order: m.Order, Amount: m.Amount}
		p.charges[key] = ch
		p.byOrder[m.Order]++
	}
	drop := rand.Float64() < p.DropRate
	if drop {
		p.dropped++
	}
	p.mu.Unlock()
	if drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close() // charged; the answer never leaves
				return
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ch)
}

// Charges returns how many times each order was charged.
func (p *Provider) Charges() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.byOrder))
	for o, n := range p.byOrder {
		out[o] = n
	}
	return out
}

// Dropped returns how many answers were lost after a charge.
func (p *Provider) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// ChargeOf returns the charge made for order, if any.
func (p *Provider) ChargeOf(order string) (Charge, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ch := range p.charges {
		if ch.Order == order {
			return ch, true
		}
	}
	return Charge{}, false
}

// ErrDoubleCharge is what Check returns for an order charged more than
// once.
var ErrDoubleCharge = errors.New("payment: an order charged more than once")
