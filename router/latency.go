package main

// Client-visible latency per tenant, as the router sees it: a statement from the command's arrival at
// the router to the last packet of its answer, and a transaction from its first statement (sent with
// the connection between transactions) to the answer that leaves it outside one (autocommit statements
// are one each). The same terms as the server's performance_schema transaction time, measured where the
// client is, so the copy's throttle (slacker.latency.RouterLatencySource) can steer by it.

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// latencyBuckets are the histogram's upper bounds in seconds (Prometheus' `le`).
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// histogram is a lock-free latency histogram: ever-growing counters a scraper windows itself, and the
// last seconds' totals (recent) for a caller that has no earlier scrape to window against.
type histogram struct {
	counts [16]atomic.Int64 // per bucket (not cumulative); the last is +Inf
	count  atomic.Int64
	sumNs  atomic.Int64
	recent atomic.Pointer[recentRing] // made at the first observation: no memory for a tenant without traffic
}

func (h *histogram) observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	s := d.Seconds()
	i := 0
	for i < len(latencyBuckets) && s > latencyBuckets[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
	h.count.Add(1)
	r := h.recent.Load()
	if r == nil {
		h.recent.CompareAndSwap(nil, &recentRing{})
		r = h.recent.Load()
	}
	r.add(nowNs(), d)
}

// recentTotal: the last `seconds` complete seconds' totals (recentRing.total); none before any traffic.
func (h *histogram) recentTotal(atNs int64, seconds int) (used int, count, sumNs int64) {
	if r := h.recent.Load(); r != nil {
		return r.total(atNs, seconds)
	}
	return recentSpan(seconds), 0, 0
}

// recentSeconds: how many one-second slots a tenant's ring keeps; the one in progress is among them, so
// recentSeconds-1 complete seconds can be asked for.
const recentSeconds = 16

// secondTotals: the observations that ended within one wall-clock second (Unix seconds).
type secondTotals struct {
	sec, count, sumNs int64
}

// recentRing: per-second totals of the last recentSeconds seconds, a slot per second modulo the ring. A
// slot still holding an older second is stale (the tenant was idle then) and reads as empty; it is reset
// by the first observation of its new second. Fixed size, made for a tenant at its first measured
// statement (a routed tenant without traffic has none): no goroutine per tenant, O(1) per observation.
type recentRing struct {
	mu    sync.Mutex
	slots [recentSeconds]secondTotals
}

func (r *recentRing) add(atNs int64, d time.Duration) {
	sec := atNs / int64(time.Second)
	r.mu.Lock()
	s := &r.slots[sec%recentSeconds]
	if s.sec != sec {
		*s = secondTotals{sec: sec}
	}
	s.count++
	s.sumNs += int64(d)
	r.mu.Unlock()
}

// recentSpan: the seconds a ring can answer for, of those asked.
func recentSpan(seconds int) int {
	if seconds < 1 {
		return 1
	}
	if seconds > recentSeconds-1 {
		return recentSeconds - 1
	}
	return seconds
}

// total sums the last `seconds` complete seconds before atNs (the second in progress left out: its
// count is still growing); seconds is clamped to 1..recentSeconds-1 and returned as used.
func (r *recentRing) total(atNs int64, seconds int) (used int, count, sumNs int64) {
	seconds = recentSpan(seconds)
	now := atNs / int64(time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	for sec := now - int64(seconds); sec < now; sec++ {
		if s := r.slots[sec%recentSeconds]; s.sec == sec {
			count += s.count
			sumNs += s.sumNs
		}
	}
	return seconds, count, sumNs
}

// write appends the histogram in Prometheus' text format, one series per tenant.
func (h *histogram) write(b *strings.Builder, name, tenant string) {
	var cum int64
	for i, le := range latencyBuckets {
		cum += h.counts[i].Load()
		fmt.Fprintf(b, "%s_bucket{tenant=%q,le=\"%g\"} %d\n", name, tenant, le, cum)
	}
	count := h.count.Load()
	fmt.Fprintf(b, "%s_bucket{tenant=%q,le=\"+Inf\"} %d\n", name, tenant, count)
	fmt.Fprintf(b, "%s_sum{tenant=%q} %.9f\n", name, tenant, float64(h.sumNs.Load())/1e9)
	fmt.Fprintf(b, "%s_count{tenant=%q} %d\n", name, tenant, count)
}

// latencyStats: a tenant's statements and transactions.
type latencyStats struct {
	statements, transactions histogram
}

// isStatement: the commands whose answer is a statement's (a query, a prepared statement's execution or
// its rows); pings, prepares and the like are the driver's, not the application's.
func isStatement(cmd byte) bool {
	return cmd == comQuery || cmd == comStmtExecute || cmd == comStmtFetch
}

// txClock follows one connection's transactions for latencyStats (used by the tracker).
type txClock struct {
	start atomic.Int64 // UnixNano of the transaction's first statement; 0: none open
}

func nowNs() int64 { return time.Now().UnixNano() }
