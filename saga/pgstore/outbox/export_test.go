package outbox

// OnPublish has f called after each message t's relay publishes (a
// duplicate the queue dropped included).
func OnPublish(t *Table, f func(queue, messageID string)) { t.published = f }
