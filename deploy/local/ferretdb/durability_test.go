package main

import (
	"database/sql"
	"expvar"
	"path/filepath"
	"testing"
)

// Every level a connection is opened with is what countSync reads back from it.
func TestCountSyncReadsTheConnectionsLevel(t *testing.T) {
	for _, mode := range []string{"off", "normal", "full", "extra"} {
		syncMode = mode
		path := filepath.Join(t.TempDir(), "x.sqlite")
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(wal)&"+syncPragma())
		if err != nil {
			t.Fatal(err)
		}
		key := mode + "/wal"
		before := int64(0)
		if v := effectiveSync.Get(key); v != nil {
			before = v.(*expvar.Int).Value()
		}
		if _, err = db.Exec("CREATE TABLE t (x)"); err != nil {
			t.Fatal(err)
		}
		_ = db.Close()
		got := effectiveSync.Get(key)
		if got == nil || got.(*expvar.Int).Value() <= before {
			t.Fatalf("%s: no connection counted under %q: %v", mode, key, effectiveSync.String())
		}
	}
	syncMode = "full"
}
