// Command ferretdb runs an embedded FerretDB v1.24 with its SQLite backend.
//
// We embed github.com/FerretDB/FerretDB/ferretdb instead of `go install`ing
// cmd/ferretdb: a module-proxy build of the latter panics at start-up on a
// missing build/version/version.txt (FerretDB issue 2982). The embeddable
// package skips that check.
//
// Usage: ferretdb -listen 127.0.0.1:27017 -sqlite-dir /path/to/data [-log-level info]
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
	// WAL with synchronous=NORMAL is SQLite's own advice for WAL databases: a commit is
	// durable once it is in the WAL file, which survives a crash (kill -9) of this process or of
	// any client; only an operating-system crash or power loss can lose the last commits (as
	// Kafka's default flush policy can). FULL fsyncs every statement, and FerretDB v1 runs every
	// statement of a bulk write as its own transaction: ~1 ms each (docs/local-stack.md).
	syncMode := flag.String("sqlite-synchronous", "normal",
		"SQLite synchronous pragma for every connection: off, normal, full or extra")
	idEvery := flag.Duration("id-index-interval", 200*time.Millisecond,
		"how often to give new collections the exact _id index (idindex.go); 0 turns it off")
	flag.Parse()

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "bad -log-level: %v\n", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))

	abs, err := filepath.Abs(*dir)
	if err != nil {
		logger.Error("resolve sqlite dir", "err", err)
		os.Exit(1)
	}
	if err = os.MkdirAll(abs, 0o755); err != nil {
		logger.Error("create sqlite dir", "err", err)
		os.Exit(1)
	}

	f, err := ferretdb.New(&ferretdb.Config{
		Listener: ferretdb.ListenerConfig{
			TCP: *listen, TLS: *listenTLS,
			TLSCertFile: *certFile, TLSKeyFile: *keyFile, TLSCAFile: *caFile,
		},
		Logger:    logger,
		Handler:   "sqlite",
		SQLiteURL: "file:" + abs + "/?_pragma=synchronous(" + *syncMode + ")",
	})
	if err != nil {
		logger.Error("start", "err", err)
		os.Exit(1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *idEvery > 0 {
		go newIDIndexer(abs, logger).run(ctx, *idEvery)
	}

	logger.Info("ferretdb (embedded, sqlite) listening", "addr", *listen, "tls", *listenTLS,
		"dir", abs)
	if err = f.Run(ctx); err != nil {
		logger.Error("run", "err", err)
		os.Exit(1)
	}
	logger.Info("ferretdb stopped")
}
