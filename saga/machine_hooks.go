package saga

// Queue returns the name of the queue the step's dispatcher receives
// from: the queue replies to the handler's requests come back to
// (WithReplyTo), as package saga/machine's requests do.
func (c *Context[S]) Queue() string {
	if c.step == nil || c.step.d == nil {
		return ""
	}
	return c.step.d.queueName
}
