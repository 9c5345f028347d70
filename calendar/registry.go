package calendar

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
)

// Registry holds calendars by name and version, for finding the calendar a stored timeout
// names. The zero Registry is empty and ready to use; it is safe for concurrent use. A
// program builds one at start, with every version of a calendar that pending timeouts may
// still name, and passes it where rules are planned.
type Registry struct {
	mu   sync.RWMutex
	cals map[Ref]Calendar
}

// Add adds calendars. A nil calendar, one with an empty name or version, or one whose name
// and version the registry already holds is an error wrapping [ErrInvalidCalendar]; the
// calendars before it are added.
func (r *Registry) Add(cals ...Calendar) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cals == nil {
		r.cals = map[Ref]Calendar{}
	}
	for _, c := range cals {
		if c == nil {
			return fmt.Errorf("%w: nil calendar", ErrInvalidCalendar)
		}
		ref := RefOf(c)
		if ref.Name == "" || ref.Version == "" {
			return fmt.Errorf("%w: calendar %q has an empty name or version", ErrInvalidCalendar, ref)
		}
		if _, dup := r.cals[ref]; dup {
			return fmt.Errorf("%w: calendar %s added twice", ErrInvalidCalendar, ref)
		}
		r.cals[ref] = c
	}
	return nil
}

// Lookup returns the calendar of ref's name and version, or an error wrapping
// [ErrUnknownCalendar].
func (r *Registry) Lookup(ref Ref) (Calendar, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if c, ok := r.cals[ref]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrUnknownCalendar, ref)
}

// Refs returns the names and versions the registry holds, sorted by name, then version.
func (r *Registry) Refs() []Ref {
	r.mu.RLock()
	defer r.mu.RUnlock()
	refs := make([]Ref, 0, len(r.cals))
	for ref := range r.cals {
		refs = append(refs, ref)
	}
	slices.SortFunc(refs, func(a, b Ref) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Version, b.Version))
	})
	return refs
}
