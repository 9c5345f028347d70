package saga

import "github.com/jetsaga/jetsaga/transport"

// OnHold has d call f as it begins to hold a timeout activated early
// until its due time. Set it before d runs.
func OnHold(d *Dispatcher, f func(*transport.Delivery)) { d.onHold = f }

// LoseCompletion makes a step whose message f returns true for leave it
// locked instead of completing it, as if its worker died right after its
// commit: it is delivered again once its lock expires.
func LoseCompletion(f func(*transport.Delivery) bool) Option {
	return optionFunc(func(c *config) error { c.loseCompletion = f; return nil })
}
