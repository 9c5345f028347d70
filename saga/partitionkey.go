package saga

import (
	"fmt"

	"github.com/jetsaga/jetsaga/transport"
)

// PartitionKeyBy gives each instance of the saga the fairness key key(id)
// (id is the instance's ID), instead of the default: the PartitionKey of
// the message that started the instance.
//
// An instance's key is kept in its record when the instance starts and
// does not change. Every message the instance sends (Send, Publish,
// Reply) and every timeout it requests carries it as its
// transport.Message.PartitionKey, unless the step gives another
// (WithPartitionKey) or a SessionID (a session's messages stay in the
// session's partition). On a queue with several partitions, a tenant's
// timeouts then come due in the tenant's partition, and a burst of one
// tenant's timeouts does not delay the others' (see the guide's
// "Partitions and noisy neighbours"). The Temporal engine ignores the
// key: its timeouts are delivered without one.
//
// key returning "" gives the instance no key. A key the transport would
// refuse (longer than 128 bytes, control characters) fails the step that
// starts the instance with an error matching transport.ErrInvalidMessage.
// Instances started before the key existed have none.
func PartitionKeyBy(key func(id string) string) DefinitionOption {
	return func(c *definitionConfig) { c.partitionKey = key }
}

// keyInstance gives a new instance its key: keyOf(id), or the key of the
// message that started it.
func (s *stepState) keyInstance(keyOf func(id string) string) error {
	if !s.isNew || s.rec.PartitionKey != "" {
		return nil
	}
	key := ""
	if keyOf != nil {
		key = keyOf(s.id)
	} else if s.in != nil {
		key = s.in.PartitionKey
	}
	if key == "" {
		return nil
	}
	if err := s.d.broker.Validate(&transport.Message{PartitionKey: key}); err != nil {
		return Permanent(fmt.Errorf("saga %s/%s: the instance's partition key: %w", s.sagaName, s.id, err))
	}
	s.rec.PartitionKey = key
	return nil
}

// inheritKey gives an outgoing envelope, before its SendOptions, the
// instance's key; keepKey, after them, takes it back if an option set a
// SessionID, which chooses the partition itself.
func (s *stepState) inheritKey(e *envelope) { e.PartitionKey = s.rec.PartitionKey }

func (s *stepState) keepKey(e *envelope) {
	if e.SessionID != "" && e.PartitionKey == s.rec.PartitionKey && e.PartitionKey != e.SessionID {
		e.PartitionKey = ""
	}
}
