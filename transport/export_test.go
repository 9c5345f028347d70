package transport

// SetAnswerLost makes JetStream writes (Send, Schedule, Cancel, Complete)
// act as if their answer was lost whenever f returns true; the returned
// function undoes it.
func SetAnswerLost(f func() bool) (undo func()) {
	answerLost = f
	return func() { answerLost = nil }
}
