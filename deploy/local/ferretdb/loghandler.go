package main

import (
	"context"
	"log/slog"
)

// lazyAttrs defers slog's WithAttrs to the records that are really written.
//
// FerretDB v1 derives a logger for every SQL statement it runs (fsql: With("query", …,
// "args", …), the arguments being whole documents), and slog's TextHandler formats those
// attributes at once, in WithAttrs, whether a record is ever logged or not. At -log-level
// warn nothing is, and the formatting took ~8 % of the store's CPU in the receipts bench
// (pprof, docs/local-stack.md). Here the attributes are only kept, and formatted by the
// inner handler when a record passes the level.
type lazyAttrs struct {
	inner slog.Handler
	attrs []slog.Attr
}

func (h lazyAttrs) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	return h.resolved().Handle(ctx, r)
}

func (h lazyAttrs) WithAttrs(as []slog.Attr) slog.Handler {
	all := make([]slog.Attr, 0, len(h.attrs)+len(as))
	return lazyAttrs{inner: h.inner, attrs: append(append(all, h.attrs...), as...)}
}

// WithGroup is rare (not on the statement path): the kept attributes go to the inner
// handler first, so they stay outside the group as they were given.
func (h lazyAttrs) WithGroup(name string) slog.Handler {
	return lazyAttrs{inner: h.resolved().WithGroup(name)}
}

func (h lazyAttrs) resolved() slog.Handler {
	if len(h.attrs) == 0 {
		return h.inner
	}
	return h.inner.WithAttrs(h.attrs)
}
