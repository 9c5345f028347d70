package cli

import (
	"fmt"
	"time"
)

// housekeepRelist is how often housekeep looks for new queues.
const housekeepRelist = 10 * time.Second

// cmdHousekeep attaches the queues named, or every queue, so that the
// broker's housekeeping looks after them, until the context ends.
func cmdHousekeep(c *call) error {
	kept := make(map[string]bool)
	for {
		names := c.args
		if len(names) == 0 {
			var err error
			if names, err = c.env.listQueueNames(c.ctx); err != nil && c.ctx.Err() == nil {
				return err
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
		case <-time.After(housekeepRelist):
		}
	}
}
