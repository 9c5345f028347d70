package saga

import "github.com/jetsaga/jetsaga/transport"

// OnHold has d call f as it begins to hold a timeout activated early
// until its due time. Set it before d runs.
func OnHold(d *Dispatcher, f func(*transport.Delivery)) { d.onHold = f }
