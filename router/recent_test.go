package main

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"
)

const sec = int64(time.Second)

func TestRecentRingSumsCompleteSeconds(t *testing.T) {
	var r recentRing
	base := int64(1_700_000_000) * sec
	r.add(base+100, 10*time.Millisecond)         // second 0
	r.add(base+sec/2, 30*time.Millisecond)       // second 0
	r.add(base+sec+1, 20*time.Millisecond)       // second 1
	r.add(base+2*sec+5, 500*time.Millisecond)    // second 2: still in progress when read at 2.5 s
	used, n, sum := r.total(base+2*sec+sec/2, 2) // seconds 0 and 1
	if used != 2 || n != 3 || time.Duration(sum) != 60*time.Millisecond {
		t.Fatalf("got %d s, %d, %v; want 2 s, 3, 60ms", used, n, time.Duration(sum))
	}
	if _, n, _ := r.total(base+2*sec+sec/2, 1); n != 1 { // second 1 only
		t.Fatalf("last second: %d, want 1", n)
	}
	// Asked for more than the ring keeps: clamped, and said so.
	if used, n, _ := r.total(base+2*sec+sec/2, 1000); used != recentSeconds-1 || n != 3 {
		t.Fatalf("clamped: %d s, %d; want %d s, 3", used, n, recentSeconds-1)
	}
}

func TestRecentRingRollsOverAndForgetsIdleSeconds(t *testing.T) {
	var r recentRing
	base := int64(1_700_000_000) * sec
	for i := int64(0); i < 40; i++ { // 40 s of one 1 ms observation a second: the ring wraps twice
		r.add(base+i*sec, time.Millisecond)
	}
	at := base + 40*sec
	if used, n, sum := r.total(at, 15); used != 15 || n != 15 || time.Duration(sum) != 15*time.Millisecond {
		t.Fatalf("after wrapping: %d s, %d, %v", used, n, time.Duration(sum))
	}
	// A gap: nothing from 40 s to 45 s, then one observation. Slots of seconds before the gap that share
	// a position with the seconds read are stale and count nothing.
	r.add(base+45*sec, 7*time.Millisecond)
	if _, n, sum := r.total(base+46*sec, 6); n != 1 || time.Duration(sum) != 7*time.Millisecond {
		t.Fatalf("gap: %d, %v; want 1, 7ms", n, time.Duration(sum))
	}
	if _, n, _ := r.total(base+46*sec, 15); n != 10 { // 31..39 (9) before the gap, and 45
		t.Fatalf("gap over 15 s: %d, want 10", n)
	}
	// Idle for longer than the ring: every slot is an older second.
	if _, n, _ := r.total(base+100*sec, 15); n != 0 {
		t.Fatalf("idle tenant: %d, want 0", n)
	}
}

func TestRecentEndpoint(t *testing.T) {
	rt := &Router{stats: map[string]*tenantStats{}, routes: map[string]*route{}}
	st := &tenantStats{}
	rt.stats["busy"] = st
	rt.stats["quiet"] = &tenantStats{} // routed, no traffic: no ring made
	// Observations a second ago land in the last complete second.
	st.latency.transactions.observe(0) // makes the ring
	r := st.latency.transactions.recent.Load()
	*r = recentRing{}
	r.add(nowNs()-sec, 40*time.Millisecond)
	r.add(nowNs()-sec, 20*time.Millisecond)
	if st.latency.statements.recent.Load() == nil {
		st.latency.statements.observe(time.Millisecond)
	}
	if rt.stats["quiet"].latency.transactions.recent.Load() != nil {
		t.Fatal("a tenant without traffic has a ring")
	}
	get := func(q string) (int, map[string]any) {
		w := httptest.NewRecorder()
		rt.serveRecentLatency(w, httptest.NewRequest("GET", "/v1/latency/recent?"+q, nil))
		var doc map[string]any
		json.Unmarshal(w.Body.Bytes(), &doc)
		return w.Code, doc
	}
	code, doc := get("tenant=busy&seconds=3&kind=transactions")
	if code != 200 || doc["count"].(float64) != 2 || doc["seconds"].(float64) != 3 || doc["kind"] != "transactions" {
		t.Fatalf("busy: %d %v", code, doc)
	}
	if s := doc["sum_s"].(float64); s < 0.0599 || s > 0.0601 {
		t.Fatalf("sum_s %v, want 0.06", s)
	}
	if code, doc := get("tenant=quiet&seconds=99"); code != 200 || doc["count"].(float64) != 0 ||
		doc["seconds"].(float64) != recentSeconds-1 {
		t.Fatalf("quiet: %d %v", code, doc)
	}
	if code, doc := get("tenant=nobody&seconds=5&kind=statements"); code != 200 || doc["count"].(float64) != 0 {
		t.Fatalf("unknown tenant: %d %v", code, doc)
	}
	if code, _ := get("tenant=busy&kind=rows"); code != 400 {
		t.Fatalf("bad kind: %d, want 400", code)
	}
	if code, _ := get("tenant=busy&seconds=-1"); code != 400 {
		t.Fatalf("bad seconds: %d, want 400", code)
	}
}
