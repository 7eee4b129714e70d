package main

// The durability of the local store: SQLite's synchronous level, the same on every connection
// the process opens (FerretDB's, the _id indexer's, the checkpointer's), and what it really is.
//
// The default is FULL (-sqlite-synchronous full). FerretDB runs SQLite in WAL mode; SQLite's
// documentation (pragma.html#pragma_synchronous, wal.html "Performance Considerations"):
//   - FULL: "the WAL file is synchronized before each transaction commit": a commit FerretDB has
//     answered is on the disk; an operating-system crash or a power loss neither loses it nor
//     corrupts the file.
//   - NORMAL in WAL mode: never corrupted ("WAL mode is always consistent with
//     synchronous=NORMAL"), but not durable: "A transaction committed in WAL mode with
//     synchronous=NORMAL might roll back following a power loss or system crash" — the commits
//     since the last checkpoint's fsync can be lost, although they were acknowledged.
//   - OFF: no fsync at all; "if the operating system crashes or the computer loses power before
//     that data has been written to the disk surface ... the database might become corrupted".
//
// The local stack's promise is that an acknowledged write survives an OS crash, so only FULL
// (or EXTRA) keeps it; OFF and NORMAL are opt-ins for speed (docs/local-stack.md).
//
// effectiveSync counts, on /debug/vars of -pprof-listen as sqlite_connections, every SQLite
// connection opened so far by "<synchronous>/<journal_mode>" as the connection itself reports
// them after its pragmas (PRAGMA synchronous, PRAGMA journal_mode): what runs, not what was
// asked for. A connection whose level cannot be read counts as "unknown/…".

import (
	"context"
	"database/sql/driver"
	"expvar"
	"fmt"

	"modernc.org/sqlite"
)

// syncMode is -sqlite-synchronous; the wrapper's own connections (idindex.go, checkpoint.go)
// take it too, through syncPragma.
var syncMode = "full"

var effectiveSync = expvar.NewMap("sqlite_connections")

func init() {
	sqlite.RegisterConnectionHook(countSync)
}

// syncPragma is the DSN parameter that gives a connection the store's synchronous level.
func syncPragma() string {
	return "_pragma=synchronous(" + syncMode + ")"
}

// syncName is SQLite's name for a PRAGMA synchronous value.
func syncName(v int64) string {
	switch v {
	case 0:
		return "off"
	case 1:
		return "normal"
	case 2:
		return "full"
	case 3:
		return "extra"
	}
	return fmt.Sprintf("unknown(%d)", v)
}

// countSync never fails a connection: what it cannot read it counts as unknown.
func countSync(c sqlite.ExecQuerierContext, _ string) error {
	sync, journal := "unknown", "unknown"
	if v, err := pragma(c, "synchronous"); err == nil {
		if n, ok := v.(int64); ok {
			sync = syncName(n)
		}
	}
	if v, err := pragma(c, "journal_mode"); err == nil {
		switch s := v.(type) {
		case string:
			journal = s
		case []byte:
			journal = string(s)
		}
	}
	effectiveSync.Add(sync+"/"+journal, 1)
	return nil
}

func pragma(c sqlite.ExecQuerierContext, name string) (driver.Value, error) {
	rows, err := c.QueryContext(context.Background(), "PRAGMA "+name, nil)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	v := make([]driver.Value, 1)
	if err = rows.Next(v); err != nil {
		return nil, err
	}
	return v[0], nil
}
