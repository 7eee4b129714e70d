package main

// WAL checkpoints off the commit path.
//
// In WAL mode SQLite copies the WAL back into the database file in a checkpoint, which fsyncs
// the WAL and then the database file. By default the connection whose commit takes the WAL past
// 1 000 pages runs it (wal_autocheckpoint), inside the write FerretDB is answering: on this
// project's 2-core VMs, whose one disk the broker writes to as well, an fsync usually takes
// ~0.4 ms but 0.1–1 s a few times a minute, and one insert in a few thousand waited that long
// (0.4–5.5 s, docs/local-stack.md) — the stalls the growth benchmark kept meeting.
//
// Opt-in (-checkpoint-interval, default 0: SQLite's own checkpoints). It removes those stalls
// from single inserts, but the growth benchmark was worse with it in two full runs: after a
// bulk load the copying that SQLite's own checkpoints spread over the load is left to the
// first measured phase (p99 at 10^6 Items, one Session, 0.7 s and 4.7 s against 0.08 s;
// docs/local-stack.md). With it, FerretDB's connections run with wal_autocheckpoint(0)
// (main.go), and this goroutine runs a
// PASSIVE checkpoint from a connection of its own, every interval, on each database whose WAL
// changed since its last one. A PASSIVE checkpoint waits for no reader and no writer: commits go
// on appending to the WAL while it copies, and SQLite restarts the WAL from its beginning at the
// first commit after a complete checkpoint. Nothing about durability changes: the checkpoint is
// SQLite's own, on a connection at the store's synchronous level (durability.go), so a crash at
// any point leaves the database as consistent as before.
//
// What it costs: SQLite starts the WAL over only when a write begins after a complete
// checkpoint, and under a steady stream of writes one always commits while a background
// checkpoint syncs, so the WAL file keeps growing (readers do not pay for it: they look up only
// the frames after the last checkpoint). Once it passes truncateAt (-wal-truncate-at, 256 MiB),
// a PASSIVE checkpoint that copied everything in under 100 ms is followed by a TRUNCATE one,
// which waits (at most 50 ms) for the writer of the moment, copies the few frames committed
// since the PASSIVE one, syncs, waits (at most 50 ms) for the readers of older frames and
// empties the file — holding writers back meanwhile, once per truncateAt of writes instead of
// once per 1 000 pages. (Without those bounds, a TRUNCATE after a long PASSIVE copy held writers
// back for seconds: the receipts benchmark's p99 went from ~6 s to 16 s.)
//
// Like the _id indexer's (idindex.go), the checkpoint's connection is open for milliseconds at a
// time; a database dropped and created again under the same name within those milliseconds is
// not provided for (SQLite's last connection to the dropped file removes its WAL by name). The
// product never drops a database, and tests and benchmarks never reuse a name.

import (
	"context"
	"database/sql"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

type checkpointer struct {
	truncateAt int64 // the WAL size past which a checkpoint also empties the WAL (see above)
	logger     *slog.Logger
	files      *sqliteFiles // stamped by their WAL only
}

func newCheckpointer(dir string, truncateAt int64, logger *slog.Logger) *checkpointer {
	return &checkpointer{truncateAt: truncateAt, logger: logger,
		files: newSQLiteFiles(dir, "checkpoint", logger, walStamp)}
}

// walStamp: a checkpoint writes the WAL-index, not the WAL, so this stamp moves only with
// commits; an absent or empty WAL needs no checkpoint.
func walStamp(path string) (fileStamp, bool) {
	wi, err := os.Stat(path + "-wal")
	if err != nil || wi.Size() == 0 {
		return fileStamp{}, false
	}
	return fileStamp{walMod: wi.ModTime(), wal: wi.Size()}, true
}

// run checkpoints every interval until ctx ends.
func (c *checkpointer) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.sweep(ctx)
	}
}

func (c *checkpointer) sweep(ctx context.Context) {
	c.files.sweep(func(path string, st fileStamp) error {
		return c.checkpoint(ctx, path, st.wal >= c.truncateAt)
	})
}

// quickCopy: a PASSIVE checkpoint that copied everything within this long is followed, when
// the WAL is over truncateAt, by the TRUNCATE one: what it must copy while holding writers back
// is then at most this long's worth of commits.
const quickCopy = 100 * time.Millisecond

// checkpoint runs a PASSIVE checkpoint on one database file and, with truncate and when that
// one was complete and quick, a TRUNCATE one that gives up after 50 ms of waiting for the
// writer of the moment or for readers (SQLITE_BUSY: it is tried again next interval).
func (c *checkpointer) checkpoint(ctx context.Context, path string, truncate bool) error {
	// mode=rw: never create a file FerretDB has just dropped
	db, err := sql.Open("sqlite", "file:"+path+"?mode=rw&_pragma=busy_timeout(50)&"+syncPragma())
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	start := time.Now()
	var busy, frames, copied int
	q := "PRAGMA wal_checkpoint(PASSIVE)"
	if err = db.QueryRowContext(ctx, q).Scan(&busy, &frames, &copied); err != nil {
		return err
	}
	took := time.Since(start)
	if took > quickCopy {
		c.logger.Info("checkpoint", "mode", "PASSIVE", "file", filepath.Base(path), "took", took,
			"frames", frames, "copied", copied)
	}
	if !truncate || busy != 0 || copied != frames || took > quickCopy {
		return nil
	}
	start = time.Now()
	q = "PRAGMA wal_checkpoint(TRUNCATE)"
	if err = db.QueryRowContext(ctx, q).Scan(&busy, &frames, &copied); err != nil {
		return err
	}
	c.logger.Info("checkpoint", "mode", "TRUNCATE", "file", filepath.Base(path),
		"took", time.Since(start), "busy", busy)
	return nil
}
