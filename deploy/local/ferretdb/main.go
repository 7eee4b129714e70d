// Command ferretdb runs an embedded FerretDB v1.24 with its SQLite backend (default) or its
// PostgreSQL backend (-backend postgresql -postgresql-url postgres://…).
//
// We embed github.com/FerretDB/FerretDB/ferretdb instead of `go install`ing
// cmd/ferretdb: a module-proxy build of the latter panics at start-up on a
// missing build/version/version.txt (FerretDB issue 2982). The embeddable
// package skips that check.
//
// Usage: ferretdb -listen 127.0.0.1:27017 -sqlite-dir /path/to/data [-log-level info]
//
//	ferretdb -listen 127.0.0.1:27017 -backend postgresql -postgresql-url postgres://u@127.0.0.1:5432/db
//
//	[-listen-tls 127.0.0.1:27018 -tls-cert-file server.pem -tls-key-file server.key
//	 [-tls-ca-file ca.pem]]
//
// -listen "" turns the plain TCP listener off; -tls-ca-file makes client certificates
// signed by that CA required (mutual TLS).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	_ "net/http/pprof" // served only with -pprof-listen
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:27017", "TCP address to listen on")
	dir := flag.String("sqlite-dir", "data", "directory holding the SQLite database files")
	level := flag.String("log-level", "info", "debug, info, warn or error")
	listenTLS := flag.String("listen-tls", "", "TLS address to listen on (empty: no TLS listener)")
	certFile := flag.String("tls-cert-file", "", "server certificate (PEM) for -listen-tls")
	keyFile := flag.String("tls-key-file", "", "its private key (PEM)")
	caFile := flag.String("tls-ca-file", "", "CA (PEM) whose client certificates are required")
	// synchronous=FULL by default: every commit's WAL is fsynced before FerretDB answers, so an
	// acknowledged write survives an operating-system crash or power loss and the file cannot be
	// corrupted by one (durability.go quotes SQLite's documentation). "normal" (never corrupted,
	// but the commits since the last checkpoint can be lost) and "off" (can lose commits and
	// corrupt the file) are opt-ins for speed; their cost is measured in docs/local-stack.md.
	flag.StringVar(&syncMode, "sqlite-synchronous", syncMode,
		"SQLite synchronous pragma for every connection: full (default), extra, normal or off")
	backend := flag.String("backend", "sqlite", "FerretDB handler: sqlite or postgresql")
	pgURL := flag.String("postgresql-url", "",
		"PostgreSQL connection URL for -backend postgresql (postgres://user@host:port/db)")
	ckptEvery := flag.Duration("checkpoint-interval", 0,
		"how often to checkpoint each database's WAL from a connection of the wrapper's own, off "+
			"FerretDB's commit path (checkpoint.go; e.g. 1s); 0, the default, leaves it to "+
			"SQLite's automatic checkpoints")
	truncateAt := flag.Int64("wal-truncate-at", 256<<20,
		"WAL size in bytes past which the wrapper's checkpoint also empties the WAL (checkpoint.go)")
	idEvery := flag.Duration("id-index-interval", 200*time.Millisecond,
		"how often to give new collections the _id index FerretDB's lookups can use (idindex.go,"+
			" pgindex.go); 0 turns it off")
	pprofAt := flag.String("pprof-listen", "",
		"address to serve Go's /debug/pprof and /debug/vars on, for profiling the store (empty: off)")
	flag.DurationVar(&busyPoll, "sqlite-busy-poll", busyPoll,
		"first pause of the wrapper's SQLite busy handler (busy.go); 0 keeps SQLite's default "+
			"handler (sleeps of 1-100 ms)")
	flag.Parse()

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "bad -log-level: %v\n", err)
		os.Exit(2)
	}
	logger := slog.New(lazyAttrs{inner: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})})

	cfg := &ferretdb.Config{
		Listener: ferretdb.ListenerConfig{
			TCP: *listen, TLS: *listenTLS,
			TLSCertFile: *certFile, TLSKeyFile: *keyFile, TLSCAFile: *caFile,
		},
		Logger: logger,
	}
	var abs, where string
	switch *backend {
	case "sqlite":
		var err error
		if abs, err = filepath.Abs(*dir); err != nil {
			logger.Error("resolve sqlite dir", "err", err)
			os.Exit(1)
		}
		if err = os.MkdirAll(abs, 0o755); err != nil {
			logger.Error("create sqlite dir", "err", err)
			os.Exit(1)
		}
		switch syncMode { // SQLite takes an unknown value silently as another level
		case "off", "normal", "full", "extra":
		default:
			logger.Error("-sqlite-synchronous: expected off, normal, full or extra",
				"got", syncMode)
			os.Exit(2)
		}
		cfg.Handler = "sqlite"
		// temp_store(memory): SQLite's statement journals (each multi-row INSERT of a bulk write
		// keeps one, to undo that statement alone) in memory instead of temporary files. They
		// only ever serve a rollback inside a live transaction, so nothing of durability
		// changes; in the receipts bench the store's disk writes fell from ~556 to ~115 MB.
		cfg.SQLiteURL = "file:" + abs + "/?" + syncPragma() +
			"&_pragma=temp_store(memory)"
		if *ckptEvery > 0 {
			cfg.SQLiteURL += "&_pragma=wal_autocheckpoint(0)"
		}
		where = abs
	case "postgresql":
		u, err := postgresURL(*pgURL)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bad -postgresql-url: %v\n", err)
			os.Exit(2)
		}
		cfg.Handler = "postgresql"
		cfg.PostgreSQLURL = u
		where = redact(u)
	default:
		fmt.Fprintf(os.Stderr, "bad -backend %q: sqlite or postgresql\n", *backend)
		os.Exit(2)
	}

	f, err := ferretdb.New(cfg)
	if err != nil {
		logger.Error("start", "err", err)
		os.Exit(1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *pprofAt != "" {
		go func() {
			if err := http.ListenAndServe(*pprofAt, nil); err != nil {
				logger.Error("pprof listener", "err", err)
			}
		}()
	}
	if *ckptEvery > 0 && *backend == "sqlite" {
		go newCheckpointer(abs, *truncateAt, logger).run(ctx, *ckptEvery)
	}
	if *idEvery > 0 {
		if *backend == "sqlite" {
			go newIDIndexer(abs, logger).run(ctx, *idEvery)
		} else {
			go newPGIndexer(cfg.PostgreSQLURL, logger).run(ctx, *idEvery)
		}
	}

	logger.Info("ferretdb (embedded) listening", "backend", *backend, "addr", *listen,
		"tls", *listenTLS, "store", where, "sqlite_synchronous", syncMode)
	if err = f.Run(ctx); err != nil {
		logger.Error("run", "err", err)
		os.Exit(1)
	}
	logger.Info("ferretdb stopped")
}

// postgresURL checks the URL and makes FerretDB's connections plan every statement for its
// parameters (plan_cache_mode=force_custom_plan), unless the URL says otherwise. FerretDB caches
// prepared statements (pgx QueryExecModeCacheStatement), and its `_id` filter is
// `_jsonb->$1 @> $2`: a generic plan, which PostgreSQL may switch to after five executions,
// does not know that $1 is '_id', so it cannot use the GIN index on (_jsonb->'_id')
// (pgindex.go) and scans the table.
func postgresURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", fmt.Errorf("scheme %q: want postgres://", u.Scheme)
	}
	q := u.Query()
	if q.Get("plan_cache_mode") == "" {
		q.Set("plan_cache_mode", "force_custom_plan")
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "?"
	}
	return u.Redacted()
}
