package transport

import "log/slog"

func slogErr(err error) slog.Attr     { return slog.Any("error", err) }
func slogQueue(name string) slog.Attr { return slog.String("queue", name) }
