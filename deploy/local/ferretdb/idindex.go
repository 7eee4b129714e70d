package main

// The _id index FerretDB v1's SQLite backend should have made.
//
// FerretDB v1.24 pushes a single string/ObjectId `_id` equality down to SQLite as
//
//	SELECT _ferretdb_sjson FROM "<table>" WHERE _ferretdb_sjson->'$._id' = ?
//
// (UPDATE … WHERE and DELETE … WHERE … IN use the same expression), but the unique `_id_` index it
// creates for every collection ("<table>__id_") is on `_ferretdb_sjson->"_id"`. SQLite uses an
// expression index only for the identical expression, so every one of those statements scanned
// the whole table: lookups grew linearly with the collection.
//
// FerretDB has no hook for this in its embeddable API, and we do not patch its code, so this
// wrapper does it from outside, against the same database files: every sweep it lists the
// `*.sqlite` files in the data directory, and for each file that changed since its last look it
// rebuilds, for each collection in `_ferretdb_collections` whose `_id_` index is not on the exact
// expression yet, that index under its own name, in one transaction:
//
//	DROP INDEX "<table>__id_";
//	CREATE UNIQUE INDEX "<table>__id_" ON "<table>" (_ferretdb_sjson->'$._id')
//
// Both expressions give the same value for every document (`->"_id"` is `->'$._id'`), so the
// index enforces the same uniqueness (no writer sees the table without it: the swap is one
// transaction) and FerretDB's metadata still names it; one `_id` index per table, not two — each
// is a random-key b-tree every insert and every update writes. Idempotent (a rebuilt index is
// recognised by its SQL; the file is skipped while it is unchanged), invisible to FerretDB's
// listIndexes (same name, same key), dropped with the table when FerretDB drops the collection
// or the database. A collection is rebuilt within one sweep interval of FerretDB creating its
// `_id_` index (never before it exists: FerretDB creates it right after the table and would fail
// on a name already taken); until then lookups are correct, only slower. Older data directories
// also held a separate "<table>_sc_id_path" index on the exact expression: dropped in the swap.

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // the driver FerretDB itself uses ("sqlite")
)

const (
	ferretIDIndex = "__id_"       // FerretDB v1 names its _id index "<table>_" + "_id_"
	oldIndex      = "_sc_id_path" // the separate exact-expression index of earlier wrappers
)

type idIndexer struct {
	logger *slog.Logger
	files  *sqliteFiles
}

func newIDIndexer(dir string, logger *slog.Logger) *idIndexer {
	return &idIndexer{logger: logger, files: newSQLiteFiles(dir, "id index", logger, stampOf)}
}

func stampOf(path string) (fileStamp, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, false
	}
	st := fileStamp{mod: fi.ModTime(), size: fi.Size()}
	if wi, err := os.Stat(path + "-wal"); err == nil {
		st.walMod, st.wal = wi.ModTime(), wi.Size()
	}
	return st, true
}

// run sweeps at start and then every interval until ctx ends.
func (x *idIndexer) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		x.sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (x *idIndexer) sweep(ctx context.Context) {
	x.files.sweep(func(path string, _ fileStamp) error { return x.indexFile(ctx, path) })
}

// indexFile puts the _id_ index of every collection in one database file on the exact expression.
func (x *idIndexer) indexFile(ctx context.Context, path string) error {
	// mode=rw: never create a file FerretDB has just dropped
	// no automatic checkpoint in its commit: checkpoints are checkpoint.go's
	db, err := sql.Open("sqlite",
		"file:"+path+"?mode=rw&_pragma=busy_timeout(10000)&_pragma=wal_autocheckpoint(0)&"+
			syncPragma())
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)

	var meta int
	err = db.QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '_ferretdb_collections'`,
	).Scan(&meta)
	if err != nil || meta == 0 {
		return err // a database FerretDB is still creating: next sweep
	}
	rows, err := db.QueryContext(ctx, `
		SELECT c.table_name FROM _ferretdb_collections c
		JOIN sqlite_master m ON m.type = 'index' AND m.name = c.table_name || ?
		WHERE instr(m.sql, '''$._id''') = 0`, ferretIDIndex)
	if err != nil {
		return err
	}
	var tables []string
	for rows.Next() {
		var t string
		if err = rows.Scan(&t); err != nil {
			rows.Close()
			return err
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err = rows.Err(); err != nil {
		return err
	}
	for _, t := range tables {
		start := time.Now()
		if err = swapIDIndex(ctx, db, t); err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		x.logger.Info("id index rebuilt on the exact expression", "file", filepath.Base(path),
			"table", t, "took", time.Since(start))
	}
	return nil
}

// swapIDIndex replaces FerretDB's _id_ index of table t by a unique index on the expression its
// statements use, in one transaction (the table is never without a unique _id index).
func swapIDIndex(ctx context.Context, db *sql.DB, t string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, q := range []string{
		fmt.Sprintf(`DROP INDEX IF EXISTS %q`, t+oldIndex),
		fmt.Sprintf(`DROP INDEX %q`, t+ferretIDIndex),
		fmt.Sprintf(`CREATE UNIQUE INDEX %q ON %q (_ferretdb_sjson->'$._id')`, t+ferretIDIndex, t),
	} {
		if _, err = tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}
