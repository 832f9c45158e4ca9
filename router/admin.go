package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

type tenantStatus struct {
	route
	Active       int64   `json:"connections_active"`
	InTrans      int64   `json:"connections_in_transaction"`
	Idle         int64   `json:"connections_between_statements"`
	Connections  int64   `json:"connections_total"`
	Statements   int64   `json:"statements_total"`
	AuthFailures int64   `json:"auth_failures_total"`
	OwnerErrors  int64   `json:"owner_errors_total"`
	BytesIn      int64   `json:"client_bytes_total"`
	BytesOut     int64   `json:"owner_bytes_total"`
	Moves        int64   `json:"moves_total"`
	MoveFailures int64   `json:"move_failures_total"`
	EndedAtMove  int64   `json:"ended_at_move_total"`
	RolledBack   int64   `json:"rolled_back_at_move_total"`
	Pinned       int64   `json:"connections_pinned"`
	Held         bool    `json:"held"`
	Holds        int64   `json:"holds_total"`
	HeldCommands int64   `json:"held_commands_total"`
	HoldExpired  int64   `json:"holds_expired_total"`
	DrainTimeout int64   `json:"drain_timeouts_total"`
	HoldWaitMax  int64   `json:"hold_wait_max_us"`
	MoveMax      int64   `json:"move_max_us"`
	HoldStart    float64 `json:"hold_started_at"` // the last hold, Unix seconds (0: none; end 0: still held)
	HoldEnd      float64 `json:"hold_ended_at"`
}

func (rt *Router) snapshot() map[string]any {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	names := make([]string, 0, len(rt.stats))
	for t := range rt.stats {
		names = append(names, t)
	}
	sort.Strings(names)
	tenants := []tenantStatus{}
	for _, t := range names {
		s := rt.stats[t]
		ts := tenantStatus{Active: s.active.Load(), Connections: s.connections.Load(),
			Statements: s.statements.Load(), AuthFailures: s.authFailures.Load(),
			OwnerErrors: s.ownerErrors.Load(), BytesIn: s.bytesIn.Load(), BytesOut: s.bytesOut.Load()}
		ts.InTrans, ts.Idle, ts.Pinned = s.states()
		ts.Moves, ts.MoveFailures, ts.EndedAtMove = s.moves.Load(), s.moveFailures.Load(), s.endedAtMove.Load()
		ts.RolledBack = s.rolledBackAtMove.Load()
		ts.Held, ts.Holds, ts.HeldCommands = s.hold.Load() != nil, s.holds.Load(), s.heldCommands.Load()
		ts.HoldExpired, ts.DrainTimeout = s.holdExpired.Load(), s.drainTimeouts.Load()
		ts.HoldWaitMax, ts.MoveMax = s.lastMaxWait.Load()/1000, s.moveMax.Load()/1000
		ts.HoldStart, ts.HoldEnd = float64(s.holdStart.Load())/1e9, float64(s.holdEnd.Load())/1e9
		if r := rt.routes[t]; r != nil {
			ts.route = *r
		} else {
			ts.route = route{Tenant: t}
		}
		tenants = append(tenants, ts)
	}
	return map[string]any{
		"listen": rt.listen, "admin": rt.admin, "uptime_s": time.Since(rt.started).Seconds(),
		"directory": map[string]any{"reachable": rt.dirOK, "error": rt.dirError,
			"since_s": time.Since(rt.dirSince).Seconds()},
		"route_changes_total": rt.flips, "logins_rejected_total": rt.rejected.Load(), "tenants": tenants,
	}
}

func (rt *Router) serveStatus(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rt.snapshot())
}

func (rt *Router) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	snap := rt.snapshot()
	var b strings.Builder
	metric := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	dir := snap["directory"].(map[string]any)
	up := 0
	if dir["reachable"].(bool) {
		up = 1
	}
	metric("slacker_router_directory_reachable", "gauge",
		"1 if the last directory call succeeded; 0: routing on the last owners known")
	fmt.Fprintf(&b, "slacker_router_directory_reachable %d\n", up)
	metric("slacker_router_directory_state_seconds", "gauge", "Seconds since the directory became (un)reachable")
	fmt.Fprintf(&b, "slacker_router_directory_state_seconds %.3f\n", dir["since_s"])
	metric("slacker_router_route_changes_total", "counter", "Owner changes applied (flips seen in the directory)")
	fmt.Fprintf(&b, "slacker_router_route_changes_total %d\n", snap["route_changes_total"])
	metric("slacker_router_logins_rejected_total", "counter", "Logins refused before a tenant was known")
	fmt.Fprintf(&b, "slacker_router_logins_rejected_total %d\n", snap["logins_rejected_total"])
	tenants := snap["tenants"].([]tenantStatus)
	type col struct {
		name, typ, help string
		get             func(t tenantStatus) int64
	}
	cols := []col{
		{"slacker_router_connections", "gauge", "Client connections open now", func(t tenantStatus) int64 { return t.Active }},
		{"slacker_router_connections_in_transaction", "gauge", "Open connections inside a transaction (or after an error, until the next status)", func(t tenantStatus) int64 { return t.InTrans }},
		{"slacker_router_connections_between_statements", "gauge", "Open connections with no response outstanding, outside a transaction", func(t tenantStatus) int64 { return t.Idle }},
		{"slacker_router_connections_pinned", "gauge", "Open connections whose session cannot move to a new owner (user variables, temporary tables, locks, cursors): they end at a move", func(t tenantStatus) int64 { return t.Pinned }},
		{"slacker_router_moves_total", "counter", "Connections moved to a new owner between statements", func(t tenantStatus) int64 { return t.Moves }},
		{"slacker_router_move_failures_total", "counter", "Moves that failed (the client's connection ended)", func(t tenantStatus) int64 { return t.MoveFailures }},
		{"slacker_router_ended_at_move_total", "counter", "Connections ended at a move: pinned (answered 1927 with the reason), or their owner went away with a COMMIT in flight", func(t tenantStatus) int64 { return t.EndedAtMove }},
		{"slacker_router_rolled_back_at_move_total", "counter", "Transactions whose owner went away before their COMMIT: the client was told to restart them (1213, SQLSTATE 40001) and moved", func(t tenantStatus) int64 { return t.RolledBack }},
		{"slacker_router_holds_total", "counter", "Handovers the router took part in (holds asked for)", func(t tenantStatus) int64 { return t.Holds }},
		{"slacker_router_held_commands_total", "counter", "Commands that waited for a handover to finish", func(t tenantStatus) int64 { return t.HeldCommands }},
		{"slacker_router_holds_expired_total", "counter", "Holds that reached their deadline without a release (the handover did not answer)", func(t tenantStatus) int64 { return t.HoldExpired }},
		{"slacker_router_drain_timeouts_total", "counter", "Holds that answered with connections still inside a transaction or a statement", func(t tenantStatus) int64 { return t.DrainTimeout }},
		{"slacker_router_connections_total", "counter", "Client connections logged in", func(t tenantStatus) int64 { return t.Connections }},
		{"slacker_router_statements_total", "counter", "Commands clients sent", func(t tenantStatus) int64 { return t.Statements }},
		{"slacker_router_auth_failures_total", "counter", "Logins refused: wrong user or password", func(t tenantStatus) int64 { return t.AuthFailures }},
		{"slacker_router_owner_errors_total", "counter", "Logins that failed at the owner", func(t tenantStatus) int64 { return t.OwnerErrors }},
		{"slacker_router_client_bytes_total", "counter", "Bytes from clients", func(t tenantStatus) int64 { return t.BytesIn }},
		{"slacker_router_owner_bytes_total", "counter", "Bytes from owners", func(t tenantStatus) int64 { return t.BytesOut }},
		{"slacker_router_epoch", "gauge", "Directory epoch of the route in use", func(t tenantStatus) int64 { return t.Epoch }},
	}
	metric("slacker_router_route_lag_seconds", "gauge",
		"How long after the directory's change the router applied the route in use (clocks of hosts permitting)")
	for _, t := range tenants {
		if t.ChangedAt > 0 {
			fmt.Fprintf(&b, "slacker_router_route_lag_seconds{tenant=%q} %.6f\n", t.Tenant, t.LearnedAt-t.ChangedAt)
		}
	}
	metric("slacker_router_hold_wait_max_seconds", "gauge", "Longest wait of a command during the last hold")
	for _, t := range tenants {
		fmt.Fprintf(&b, "slacker_router_hold_wait_max_seconds{tenant=%q} %.6f\n", t.Tenant, float64(t.HoldWaitMax)/1e6)
	}
	metric("slacker_router_move_max_seconds", "gauge", "Longest move of a connection to a new owner since the last hold")
	for _, t := range tenants {
		fmt.Fprintf(&b, "slacker_router_move_max_seconds{tenant=%q} %.6f\n", t.Tenant, float64(t.MoveMax)/1e6)
	}
	for _, c := range cols {
		metric(c.name, c.typ, c.help)
		for _, t := range tenants {
			fmt.Fprintf(&b, "%s{tenant=%q} %d\n", c.name, t.Tenant, c.get(t))
		}
	}
	rt.writeLatency(&b)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	w.Write([]byte(b.String()))
}

// writeLatency appends the per-tenant latency histograms (latency.go).
func (rt *Router) writeLatency(b *strings.Builder) {
	rt.mu.RLock()
	names := make([]string, 0, len(rt.stats))
	stats := make(map[string]*tenantStats, len(rt.stats))
	for t, s := range rt.stats {
		names = append(names, t)
		stats[t] = s
	}
	rt.mu.RUnlock()
	sort.Strings(names)
	for _, h := range []struct{ name, help string }{
		{"slacker_router_statement_latency_seconds", "Client-visible statement latency: a command's arrival at the router to the last packet of its answer"},
		{"slacker_router_transaction_latency_seconds", "Client-visible transaction latency: its first statement's arrival to the answer that ends it (autocommit statements: one each)"},
	} {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", h.name, h.help, h.name)
		for _, t := range names {
			l := &stats[t].latency
			if h.name == "slacker_router_statement_latency_seconds" {
				l.statements.write(b, h.name, t)
			} else {
				l.transactions.write(b, h.name, t)
			}
		}
	}
}

// serveRecentLatency: GET /v1/latency/recent?tenant=T&seconds=N&kind=transactions|statements. The tenant's
// client-visible latency totals over the last N complete seconds (at most recentSeconds-1), from the
// per-second ring (latency.go): what its load looks like now, without two scrapes a window apart. A tenant
// with no traffic here answers a count of 0.
func (rt *Router) serveRecentLatency(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tenant, kind := q.Get("tenant"), q.Get("kind")
	if kind == "" {
		kind = "transactions"
	}
	if tenant == "" || (kind != "transactions" && kind != "statements") {
		writeJSON(w, http.StatusBadRequest, map[string]any{
			"error": "expected tenant=ID, seconds=N and kind=transactions or kind=statements"})
		return
	}
	seconds := 10
	if v := q.Get("seconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "seconds must be a whole number >= 1"})
			return
		}
		seconds = n
	}
	var count, sumNs int64
	used := recentSpan(seconds)
	if _, st := rt.lookup(tenant); st != nil {
		h := &st.latency.transactions
		if kind == "statements" {
			h = &st.latency.statements
		}
		used, count, sumNs = h.recentTotal(nowNs(), seconds)
	}
	writeJSON(w, http.StatusOK, map[string]any{"tenant": tenant, "kind": kind, "seconds": used,
		"count": count, "sum_s": float64(sumNs) / 1e9})
}
