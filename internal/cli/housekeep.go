package cli

import (
	"fmt"
	"time"
)

// housekeepRelist is how often housekeep looks for new queues.
var housekeepRelist = 10 * time.Second

// cmdHousekeep attaches the queues named, or every queue, so that the
// broker's housekeeping looks after them, until the context ends. While
// the server is away it waits (listing again at each relist); a
// connection closed for good ends it with an error matching
// transport.ErrClosed.
func cmdHousekeep(c *call) error {
	kept := make(map[string]bool)
	failing := false
	for {
		names := c.args
		if len(names) == 0 {
			var err error
			names, err = c.env.listQueueNames(c.ctx)
			switch {
			case c.ctx.Err() != nil:
				return nil
			case c.env.nc.IsClosed():
				return errClosed(c.env.nc)
			case err != nil && !failing:
				fmt.Fprintf(c.stderr, "listing queues: %v; trying again every %v\n", err, housekeepRelist)
				failing = true
			case err == nil && failing:
				fmt.Fprintln(c.stderr, "listing queues works again")
				failing = false
			}
		}
		for _, name := range names {
			if kept[name] {
				continue
			}
			if _, err := c.env.broker.Queue(c.ctx, name); err != nil {
				if c.ctx.Err() != nil {
					return nil
				}
				if len(c.args) > 0 {
					return err
				}
				fmt.Fprintf(c.stderr, "queue %s: %v; trying again\n", name, err)
				continue
			}
			kept[name] = true
			fmt.Fprintf(c.stdout, "looking after queue %s\n", name)
		}
		select {
		case <-c.ctx.Done():
			return nil
		case <-c.env.closed:
			return errClosed(c.env.nc)
		case <-time.After(housekeepRelist):
		}
	}
}
