package main

// The _id index FerretDB v1's SQLite backend should have made.
//
// FerretDB v1.24 pushes a single string/ObjectId `_id` equality down to SQLite as
//
//	SELECT _ferretdb_sjson FROM "<table>" WHERE _ferretdb_sjson->'$._id' = ?
//
// (UPDATE … WHERE and DELETE … WHERE … IN use the same expression), but the unique `_id_` index it
// creates for every collection is on `_ferretdb_sjson->"_id"`. SQLite uses an expression index
// only for the identical expression, so every one of those statements scanned the whole table:
// lookups grew linearly with the collection.
//
// FerretDB has no hook for this in its embeddable API, and we do not patch its code, so this
// wrapper does it from outside, against the same database files: every sweep it lists the
// `*.sqlite` files in the data directory, and for each file that changed since its last look it
// creates, for each collection in `_ferretdb_collections` that lacks it,
//
//	CREATE INDEX IF NOT EXISTS "<table>_sc_id_path" ON "<table>" (_ferretdb_sjson->'$._id')
//
// Idempotent (IF NOT EXISTS; the file is skipped while it is unchanged), invisible to FerretDB's
// listIndexes (not in its metadata), dropped with the table when FerretDB drops the collection or
// the database. Uniqueness stays with FerretDB's own `_id_` index. A collection is indexed within
// one sweep interval of its creation; until then lookups are correct, only slower.

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

const idIndexSuffix = "_sc_id_path"

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

// indexFile creates the missing exact-expression indexes in one database file.
func (x *idIndexer) indexFile(ctx context.Context, path string) error {
	// mode=rw: never create a file FerretDB has just dropped
	// no automatic checkpoint in its commit: checkpoints are checkpoint.go's
	db, err := sql.Open("sqlite",
		"file:"+path+"?mode=rw&_pragma=busy_timeout(10000)&_pragma=wal_autocheckpoint(0)")
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
		WHERE NOT EXISTS (SELECT 1 FROM sqlite_master m
		                  WHERE m.type = 'index' AND m.name = c.table_name || ?)
		  AND EXISTS (SELECT 1 FROM sqlite_master t
		              WHERE t.type = 'table' AND t.name = c.table_name)`, idIndexSuffix)
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
		q := fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %q ON %q (_ferretdb_sjson->'$._id')`,
			t+idIndexSuffix, t)
		if _, err = db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		x.logger.Info("id index created", "file", filepath.Base(path), "table", t,
			"took", time.Since(start))
	}
	return nil
}
