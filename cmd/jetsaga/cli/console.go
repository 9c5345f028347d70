package cli

func cmdConsole(c *call) error { return nil }
