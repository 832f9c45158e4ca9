package main

// Client-visible latency per tenant, as the router sees it: a statement from the command's arrival at
// the router to the last packet of its answer, and a transaction from its first statement (sent with
// the connection between transactions) to the answer that leaves it outside one (autocommit statements
// are one each). The same terms as the server's performance_schema transaction time, measured where the
// client is, so the copy's throttle (slacker.latency.RouterLatencySource) can steer by it.

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// latencyBuckets are the histogram's upper bounds in seconds (Prometheus' `le`).
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// histogram is a lock-free latency histogram: ever-growing counters a scraper windows itself.
type histogram struct {
	counts [16]atomic.Int64 // per bucket (not cumulative); the last is +Inf
	count  atomic.Int64
	sumNs  atomic.Int64
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
