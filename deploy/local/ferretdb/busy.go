package main

// SQLite admits one writer per database file. FerretDB keeps up to 100 connections per database
// (one per command in flight), and a connection that finds the write lock taken calls its busy
// handler until the lock is free or the busy timeout (FerretDB's 10 s) is spent. SQLite's default
// handler (`sqliteDefaultBusyCallback`, installed by FerretDB's busy_timeout pragma) sleeps 1, 2,
// 5, 10, 15, 20, 25, 25, 25, 50, 50, then 100 ms between attempts, through Go's time.Sleep
// (modernc's libc usleep), which lasts at least ~1.1 ms here. A commit of the local stack's
// writes takes 0.05-20 ms, so a writer that meets another one typically sleeps past the moment
// the lock came free, by up to the whole step: a storage batch's commit waiting behind the
// receipt tracker's delete, or one of FerretDB's per-statement transactions of a bulk write,
// lost 1-100 ms where the lock stood free most of that time.
//
// The wrapper replaces that handler on every connection with one that polls finely: a
// nanosleep(2) of `busyPoll` (it lasts ~0.1-0.2 ms here; Go's own timers do not go below
// ~1 ms) for the first 2 ms of a wait, of 4 × `busyPoll` until 20 ms, then of 1 ms, and gives up
// after the connection's own busy_timeout, as SQLite's handler did (FerretDB's 10 s; the
// checkpointer's 50 ms, checkpoint.go); a connection without one keeps no handler. Polling
// costs one attempt at the lock (a few microseconds) per step. -sqlite-busy-poll 0 keeps
// SQLite's handler (for comparison).
//
// Counters, on /debug/vars of -pprof-listen: sqlite_busy_waits (waits begun: a writer found the
// lock taken), sqlite_busy_polls (attempts after a pause), sqlite_busy_paused_us (the pauses'
// sum, by the schedule), sqlite_busy_gave_up.

import (
	"context"
	"database/sql/driver"
	"expvar"
	"fmt"
	"reflect"
	"syscall"
	"time"
	"unsafe"

	"modernc.org/libc"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// busyPoll is the first step of the handler; 0 leaves SQLite's default handler in place. Set
// from -sqlite-busy-poll before FerretDB opens a database.
var busyPoll = 100 * time.Microsecond

var (
	busyWaits  = expvar.NewInt("sqlite_busy_waits")
	busyPolls  = expvar.NewInt("sqlite_busy_polls")
	busyPaused = expvar.NewInt("sqlite_busy_paused_us")
	busyGaveUp = expvar.NewInt("sqlite_busy_gave_up")
)

func init() {
	sqlite.RegisterConnectionHook(installBusyHandler)
}

// busyStep is the pause before attempt count+1 of one wait and the time waited before it (by the
// schedule; the real pauses run a little longer). Pure, so tested without SQLite.
func busyStep(count int32, poll time.Duration) (pause, waited time.Duration) {
	fine, mid := 2*time.Millisecond, 20*time.Millisecond
	nFine := int32(fine / poll)
	nMid := int32((mid - fine) / (4 * poll))
	switch {
	case count < nFine:
		return poll, time.Duration(count) * poll
	case count < nFine+nMid:
		return 4 * poll, fine + time.Duration(count-nFine)*4*poll
	default:
		return time.Millisecond, mid + time.Duration(count-nFine-nMid)*time.Millisecond
	}
}

// busyHandler has the signature SQLite's transpiled code calls xBusyHandler with.
// Its argument is the connection's busy_timeout in milliseconds.
var busyHandler = func(_ *libc.TLS, timeoutMs uintptr, count int32) int32 {
	if count == 0 {
		busyWaits.Add(1)
	}
	pause, waited := busyStep(count, busyPoll)
	if waited+pause > time.Duration(timeoutMs)*time.Millisecond {
		busyGaveUp.Add(1)
		return 0 // SQLITE_BUSY to the statement, as after the busy timeout
	}
	busyPolls.Add(1)
	busyPaused.Add(pause.Microseconds())
	ts := syscall.NsecToTimespec(int64(pause))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
	return 1
}

// busyHandlerFP is the function pointer as modernc's C-to-Go code stores one (its __ccgo_fp).
var busyHandlerFP = *(*uintptr)(unsafe.Pointer(&busyHandler))

// installBusyHandler runs for each new connection after its pragmas (busy_timeout among them),
// so it replaces the default handler, keeping the connection's timeout. modernc.org/sqlite
// v1.32 does not export the connection's handle, so it is read from the unexported fields (db,
// tls) of its conn; a driver whose conn has no such fields fails the connection loudly instead
// of running unnoticed with the default handler.
func installBusyHandler(c sqlite.ExecQuerierContext, _ string) error {
	if busyPoll <= 0 {
		return nil
	}
	timeoutMs, err := busyTimeout(c)
	if err != nil || timeoutMs <= 0 {
		return err // no busy_timeout: SQLITE_BUSY at once, as the connection asked
	}
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("busy handler: unexpected sqlite conn %T", c)
	}
	db, tls := v.Elem().FieldByName("db"), v.Elem().FieldByName("tls")
	if !db.IsValid() || db.Kind() != reflect.Uintptr || !tls.IsValid() ||
		tls.Type() != reflect.TypeOf((*libc.TLS)(nil)) {
		return fmt.Errorf("busy handler: sqlite conn %T has no db/tls fields (driver changed?)", c)
	}
	t := (*libc.TLS)(unsafe.Pointer(tls.Pointer()))
	rc := sqlite3.Xsqlite3_busy_handler(t, uintptr(db.Uint()), busyHandlerFP, uintptr(timeoutMs))
	if rc != sqlite3.SQLITE_OK {
		return fmt.Errorf("busy handler: sqlite3_busy_handler returned %d", rc)
	}
	return nil
}

// busyTimeout is the connection's busy_timeout pragma, in milliseconds.
func busyTimeout(c sqlite.ExecQuerierContext) (int64, error) {
	rows, err := c.QueryContext(context.Background(), "PRAGMA busy_timeout", nil)
	if err != nil {
		return 0, fmt.Errorf("busy handler: read busy_timeout: %w", err)
	}
	defer rows.Close()
	v := make([]driver.Value, 1)
	if err = rows.Next(v); err != nil {
		return 0, fmt.Errorf("busy handler: read busy_timeout: %w", err)
	}
	ms, ok := v[0].(int64)
	if !ok {
		return 0, fmt.Errorf("busy handler: busy_timeout is %T", v[0])
	}
	return ms, nil
}
