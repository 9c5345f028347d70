module github.com/jetsaga/jetsaga/calendar/holidays

go 1.26.0

require (
	github.com/jetsaga/jetsaga v0.1.0
	github.com/rickar/cal/v2 v2.1.13
)
