package main

import (
	"testing"
	"time"
)

// The schedule: 0.1 ms pauses for the first 2 ms of a wait, 0.4 ms until 20 ms, then 1 ms; the
// time waited before each attempt is the sum of the pauses before it.
func TestBusyStepSchedule(t *testing.T) {
	poll := 100 * time.Microsecond
	var waited time.Duration
	for count := int32(0); count < 200; count++ {
		pause, before := busyStep(count, poll)
		if before != waited {
			t.Fatalf("count %d: waited %v by the schedule, want %v", count, before, waited)
		}
		want := time.Millisecond
		switch {
		case waited < 2*time.Millisecond:
			want = poll
		case waited < 20*time.Millisecond:
			want = 4 * poll
		}
		if pause != want {
			t.Fatalf("count %d (waited %v): pause %v, want %v", count, waited, pause, want)
		}
		waited += pause
	}
}

// A 50 ms busy_timeout (the checkpointer's) gives up after 50 ms of pauses, not 10 s.
func TestBusyHandlerGivesUpAtTheConnectionsTimeout(t *testing.T) {
	busyPoll = 100 * time.Microsecond
	count := int32(0)
	for ; busyHandler(nil, 50, count) == 1; count++ {
		if count > 1000 {
			t.Fatal("did not give up")
		}
	}
	if _, waited := busyStep(count, busyPoll); waited > 50*time.Millisecond ||
		waited < 49*time.Millisecond {
		t.Fatalf("gave up after %v of pauses, want ~50 ms", waited)
	}
}
