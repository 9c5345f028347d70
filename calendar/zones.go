package calendar

import (
	"fmt"
	"sync"
	"time"
)

// Zones keeps the time zones it has loaded, so that computing a rule does not read the zone
// database each time (time.LoadLocation takes some microseconds, [Rule.DueIn] with a loaded
// zone well under one). The zero Zones is ready to use; it is safe for concurrent use.
//
//	var zones calendar.Zones
//	loc, err := zones.Load(rule.Zone)
//	...
//	due, err := rule.DueIn(now, cal, loc)
type Zones struct {
	mu   sync.Mutex
	locs map[string]*time.Location
}

// Load returns the location named name, loading it once. An empty name (a rule that names
// no zone) or an unknown zone is an error wrapping [ErrInvalidRule], and is not kept.
func (z *Zones) Load(name string) (*time.Location, error) {
	switch name {
	case "":
		return nil, fmt.Errorf("%w: no zone: a rule names its zone with In, such as In(\"Europe/Warsaw\") or In(\"UTC\")", ErrInvalidRule)
	case "UTC":
		return time.UTC, nil
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if loc, ok := z.locs[name]; ok {
		return loc, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w: zone %q: %w", ErrInvalidRule, name, err)
	}
	if z.locs == nil {
		z.locs = map[string]*time.Location{}
	}
	z.locs[name] = loc
	return loc, nil
}
