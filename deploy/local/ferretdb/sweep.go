package main

// What the wrapper's two sweepers (idindex.go, checkpoint.go) share: a pass over the
// `*.sqlite` files of FerretDB's data directory that acts on each file whose stamp moved since
// the last time the action succeeded on it.

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

type fileStamp struct {
	mod, walMod time.Time
	size, wal   int64
}

type sqliteFiles struct {
	dir    string
	logger *slog.Logger
	what   string                              // the log lines' message
	stamp  func(path string) (fileStamp, bool) // false: nothing to do for this file now
	done   map[string]fileStamp                // each file's stamp at its last successful act
}

func newSQLiteFiles(dir, what string, logger *slog.Logger,
	stamp func(path string) (fileStamp, bool)) *sqliteFiles {
	return &sqliteFiles{dir: dir, logger: logger, what: what, stamp: stamp,
		done: map[string]fileStamp{}}
}

// sweep calls act on every file whose stamp differs from its last successful one; a failed act
// is logged and tried again next sweep; files gone from the directory are forgotten.
func (f *sqliteFiles) sweep(act func(path string, st fileStamp) error) {
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		f.logger.Warn(f.what+": read dir", "err", err)
		return
	}
	present := make(map[string]bool, len(entries))
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sqlite") {
			continue
		}
		present[name] = true
		path := filepath.Join(f.dir, name)
		st, ok := f.stamp(path)
		if !ok || f.done[name] == st {
			continue
		}
		if err := act(path, st); err != nil {
			f.logger.Warn(f.what, "file", name, "err", err) // tried again next sweep
			continue
		}
		f.done[name] = st
	}
	for name := range f.done {
		if !present[name] {
			delete(f.done, name)
		}
	}
}
