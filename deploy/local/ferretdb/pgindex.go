package main

// The _id index FerretDB v1's PostgreSQL backend should have made (the PostgreSQL counterpart of
// idindex.go).
//
// FerretDB v1.24 keeps each database as a schema holding a `_ferretdb_database_metadata` table
// and one table per collection with a single `_jsonb` column. It pushes a string/ObjectId `_id`
// equality down as
//
//	SELECT _jsonb FROM "<db>"."<table>" WHERE _jsonb->$1 @> $2   -- $1 = '_id', $2 = '"k"'
//
// (UPDATE and DELETE likewise), but the unique `_id_` index it creates is a btree on
// `((_jsonb->'_id'))`, which cannot serve the jsonb containment operator `@>`: every lookup
// scanned the whole table. A GIN index (default jsonb_ops, which supports `@>`) on the same
// expression can, once the planner sees $1 as the constant '_id' (a custom plan: the stack sets
// plan_cache_mode=force_custom_plan, see main.go).
//
// As with SQLite, FerretDB has no hook for this and we do not patch it, so the wrapper does it
// from outside over its own connection: every sweep one catalog query lists the tables of
// FerretDB schemas (those holding `_ferretdb_database_metadata`) that have a `_jsonb` column and
// no index of ours, and for each it runs
//
//	CREATE INDEX IF NOT EXISTS "sc_id_gin_<hash of table>" ON "<db>"."<table>"
//	    USING gin ((_jsonb->'_id')) WITH (fastupdate = off)
//
// fastupdate = off: with GIN's default pending list, keys inserted since the last vacuum sit in
// an unsorted list that every lookup reads in full (4.4 ms per lookup at 10^5 documents inserted
// after the index was made, against ~0.1 ms with it off); the index is made while the collection
// is still empty, so nearly every key would go through that list.
//
// Idempotent, invisible to FerretDB's listIndexes (not in its metadata), dropped with the table.
// Uniqueness stays with FerretDB's own `_id_` index. A collection gets it within one sweep of
// its creation; until then lookups are correct, only slower.

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

const pgIndexPrefix = "sc_id_gin_"

// pgIndexName is unique per table within its schema and at most 26 bytes (FerretDB's table
// names are up to 63 bytes, PostgreSQL's identifier limit, so "<table>_suffix" could not be).
func pgIndexName(table string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(table))
	return fmt.Sprintf("%s%016x", pgIndexPrefix, h.Sum64())
}

const pgMissing = `
SELECT n.nspname, c.relname
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND c.relname <> '_ferretdb_database_metadata'
  AND EXISTS (SELECT 1 FROM pg_class m WHERE m.relnamespace = n.oid
              AND m.relname = '_ferretdb_database_metadata' AND m.relkind = 'r')
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid
              AND a.attname = '_jsonb' AND NOT a.attisdropped)
  AND NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
                  WHERE i.indrelid = c.oid AND starts_with(ic.relname, $1))`

type pgIndexer struct {
	url    string
	logger *slog.Logger
	conn   *pgx.Conn
}

func newPGIndexer(url string, logger *slog.Logger) *pgIndexer {
	return &pgIndexer{url: url, logger: logger}
}

func (x *pgIndexer) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	defer func() {
		if x.conn != nil {
			_ = x.conn.Close(context.Background())
		}
	}()
	for {
		if err := x.sweep(ctx); err != nil && ctx.Err() == nil {
			x.logger.Warn("id index (postgresql)", "err", err) // retried next sweep
			if x.conn != nil {
				_ = x.conn.Close(context.Background())
				x.conn = nil
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (x *pgIndexer) sweep(ctx context.Context) error {
	if x.conn == nil {
		cfg, err := pgx.ParseConfig(x.url)
		if err != nil {
			return err
		}
		// never hold FerretDB's writers behind our lock for long: CREATE INDEX takes a SHARE lock
		cfg.RuntimeParams["lock_timeout"] = "2s"
		cfg.RuntimeParams["application_name"] = "ferretdb-sc-idindex"
		// the catalog query changes never: no statement cache needed
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
		if x.conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
			return err
		}
	}
	rows, err := x.conn.Query(ctx, pgMissing, pgIndexPrefix)
	if err != nil {
		return err
	}
	type tbl struct{ schema, name string }
	var todo []tbl
	for rows.Next() {
		var t tbl
		if err = rows.Scan(&t.schema, &t.name); err != nil {
			rows.Close()
			return err
		}
		todo = append(todo, t)
	}
	rows.Close()
	if err = rows.Err(); err != nil {
		return err
	}
	for _, t := range todo {
		start := time.Now()
		q := fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s USING gin ((_jsonb->'_id'))`+
			` WITH (fastupdate = off)`,
			pgx.Identifier{pgIndexName(t.name)}.Sanitize(),
			pgx.Identifier{t.schema, t.name}.Sanitize())
		if _, err = x.conn.Exec(ctx, q); err != nil {
			// dropped meanwhile, or FerretDB holds a lock: the next sweep tries again
			x.logger.Warn("id index (postgresql)", "schema", t.schema, "table", t.name, "err", err)
			continue
		}
		x.logger.Info("id index created", "schema", t.schema, "table", t.name,
			"took", time.Since(start))
	}
	return nil
}
